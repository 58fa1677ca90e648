package main

import (
	"math/rand/v2"
	"os"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/engine"
)

func newDrillCmd() *cobra.Command {
	var tag, scratch string
	var files int
	cmd := &cobra.Command{
		Use:    "drill --tag TAG --files N --scratch DIR -- RESTIC [GLOBAL OPTIONS]...",
		Short:  "Restore a random sample of the latest snapshot's files and verify them (run inside a verify unit)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, resticArgv []string) error {
			status := engine.RunDrill(cmd.Context(), engine.DrillConfig{Restic: resticArgv, Tag: tag, Files: files,
				Scratch: scratch, Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), Stdout: os.Stdout, Stderr: os.Stderr})
			if status != 0 {
				return exitCodeError{status}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tag, "tag", "", "sample the latest snapshot with this tag")
	f.IntVar(&files, "files", 0, "how many files to restore")
	f.StringVar(&scratch, "scratch", "", "the directory to restore into (made, and removed after)")
	for _, name := range []string{"tag", "files", "scratch"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
