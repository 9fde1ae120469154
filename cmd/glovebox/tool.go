package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// toolCmd is the static client of the tool socket, for shell scripts
// inside a box: glovebox tool orders --json '[42]'.
func toolCmd() *cobra.Command {
	var args, kwargs string
	var list bool
	cmd := &cobra.Command{
		Use:   "tool NAME [--json ARGS] [--kw KWARGS]",
		Short: "Call one of the host's tools from inside a box (through $GLOVEBOX_TOOLS)",
		Long: `Call a host tool through the tool socket a box provides (its path is in
GLOVEBOX_TOOLS). --json gives the positional arguments as a JSON array (or
one JSON value, passed as the only argument); --kw the keyword arguments
as a JSON object. The result is printed as JSON. --list prints the tools.

Exit status: 0 on success, 1 when the tool raised (its class and message
on stderr), 2 for usage errors or no socket.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			sock := os.Getenv("GLOVEBOX_TOOLS")
			if sock == "" {
				return fmt.Errorf("no tool socket: GLOVEBOX_TOOLS is not set (run inside a box with tools)")
			}
			var body string
			switch {
			case list:
				body = "list"
			case len(a) == 1:
				pos := []any{}
				if args != "" {
					var v any
					if err := json.Unmarshal([]byte(args), &v); err != nil {
						return usageError{fmt.Errorf("--json: %v", err)}
					}
					if arr, ok := v.([]any); ok {
						pos = arr
					} else {
						pos = []any{v}
					}
				}
				kw := map[string]any{}
				if kwargs != "" {
					if err := json.Unmarshal([]byte(kwargs), &kw); err != nil {
						return usageError{fmt.Errorf("--kw: want a JSON object: %v", err)}
					}
				}
				enc, err := json.Marshal([]any{pos, kw})
				if err != nil {
					return err
				}
				body = "call\n" + a[0] + "\n" + string(enc)
			default:
				return usageError{fmt.Errorf("name a tool, or --list")}
			}
			conn, err := net.Dial("unix", sock)
			if err != nil {
				return err
			}
			defer conn.Close()
			if _, err := fmt.Fprintf(conn, "%d\n%s", len(body), body); err != nil {
				return err
			}
			r := bufio.NewReader(conn)
			line, err := r.ReadString('\n')
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || n < 0 || n > 64<<20 {
				return fmt.Errorf("malformed reply from the tool socket")
			}
			reply := make([]byte, n)
			if _, err := io.ReadFull(r, reply); err != nil {
				return err
			}
			tag, rest, _ := strings.Cut(string(reply), "\n")
			switch tag {
			case "n":
				fmt.Println("null")
			case "t":
				fmt.Println("true")
			case "f":
				fmt.Println("false")
			case "i", "j":
				fmt.Println(rest)
			case "s":
				b, _ := json.Marshal(rest)
				fmt.Println(string(b))
			case "err", "abort":
				class, msg, _ := strings.Cut(rest, "\n")
				fmt.Fprintf(os.Stderr, "%s: %s\n", class, msg)
				return exitError{exitStatus}
			default:
				return fmt.Errorf("malformed reply from the tool socket")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&args, "json", "", "positional arguments: a JSON array (or one value)")
	cmd.Flags().StringVar(&kwargs, "kw", "", "keyword arguments: a JSON object")
	cmd.Flags().BoolVar(&list, "list", false, "list the tools")
	return cmd
}
