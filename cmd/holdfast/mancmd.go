package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write holdfast's man pages into DIR",
		Hidden: true,
		Args:   exactArgs(1, "one directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			header := &doc.GenManHeader{Title: "HOLDFAST", Section: "1", Source: "holdfast", Manual: "holdfast manual"}
			return doc.GenManTree(cmd.Root(), header, args[0])
		},
	}
}
