package main

import "github.com/spf13/cobra"

func benchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure glovebox on this machine", Hidden: true}
}
