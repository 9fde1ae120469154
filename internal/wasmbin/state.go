package wasmbin

import "fmt"

// stateWriters names the instructions that change an instance's state
// other than its linear memory and globals: its tables, and which of its
// segments are dropped (core specification, sections 4.4.6 and 4.4.7).
// memory.init and table.get only read that state.
var stateWriters = map[[2]uint32]string{
	{0x26, 0}:  "table.set",
	{0xFC, 9}:  "data.drop",
	{0xFC, 12}: "table.init",
	{0xFC, 13}: "elem.drop",
	{0xFC, 14}: "table.copy",
	{0xFC, 15}: "table.grow",
	{0xFC, 17}: "table.fill",
}

// StateWriter finds an instruction in m's code that writes a table or
// drops a segment. It returns the instruction's name and the index of the
// body holding it among the module's defined functions, or "" when no
// body has one: the module's tables and segments are then the same in
// every instance, whatever its code ran. It fails if a body cannot be
// decoded (see Decoder), so code it cannot read never passes as clean.
func (m *Module) StateWriter() (op string, body int, err error) {
	bodies, err := m.Bodies()
	if err != nil {
		return "", 0, err
	}
	var in Instr
	for i, b := range bodies {
		hdr, err := DecodeLocals(b)
		if err != nil {
			return "", 0, fmt.Errorf("body %d: %w", i, err)
		}
		d := NewDecoder(b[hdr.Code:])
		for d.More() {
			if err := d.Next(&in); err != nil {
				return "", 0, fmt.Errorf("body %d: %w", i, err)
			}
			key := [2]uint32{uint32(in.Op), 0}
			if in.Op == 0xFC {
				key[1] = in.Sub
			}
			if name, ok := stateWriters[key]; ok {
				return name, i, nil
			}
		}
	}
	return "", 0, nil
}
