module github.com/gloveboxhq/glovebox

go 1.26.0

require (
	code.dny.dev/ssrf v0.3.0
	github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
	github.com/dustin/go-humanize v1.1.0
	github.com/peterh/liner v1.2.2
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	go.yaml.in/yaml/v3 v3.0.4
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
)
