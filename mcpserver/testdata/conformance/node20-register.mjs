// Registers node20-hooks.mjs (see there); used with node --import.
import { register } from "node:module";
register("./node20-hooks.mjs", import.meta.url);
