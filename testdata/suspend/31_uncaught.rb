double(1)
boom("unrescued")
