package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/jobdef"
)

// probeAs checks paths as a job's identity, with holdfast's own `probe-read` (see jobdef.ProbeAs).
func (g *globals) probeAs(id jobdef.Identity, want []jobdef.Access) ([]string, error) {
	self, err := g.env.executable()
	if err != nil {
		return nil, fmt.Errorf("find holdfast's own executable: %w", err)
	}
	return jobdef.ProbeAs([]string{self, "probe-read"})(id, want)
}

func newProbeReadCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "probe-read",
		Short:  "Check which paths (JSON on stdin) this process can read (used to check a job's files as its user)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var want []jobdef.Access
			if err := json.NewDecoder(io.LimitReader(cmd.InOrStdin(), 1<<20)).Decode(&want); err != nil {
				return badInput("probe-read: %v", err)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(jobdef.Readable(want))
		},
	}
}

func newProbeTargetCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "probe-target",
		Short:  "Check, make or remove a restore's target (JSON on stdin) as this process (used to check it as a job's user)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p jobdef.TargetProbe
			if err := json.NewDecoder(io.LimitReader(cmd.InOrStdin(), 1<<20)).Decode(&p); err != nil {
				return badInput("probe-target: %v", err)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(jobdef.ProbeTarget(p))
		},
	}
}
