package spawn

import (
	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A copy's unit: restic copy of its snapshot from the job's repository (the source) into the
// job's copy repository, which it works on; stale locks are removed from both.
func init() {
	registerUnit(model.KindCopy, kindUnit{
		prepare: func(b *unitBuild) {
			b.source = copySource(b.cfg, b.job, b.spec)
			b.unlocks = append(b.unlocks, unlockRepo{"--before-source", "--after-interrupt-source", b.source})
		},
		restic: func(b *unitBuild) []string { return b.restic.CopyArgv(b.ej, b.source, b.run.CopySnapshot) },
	})
}

// copySource is the job's own repository as a copy's source: its password reaches the unit as a
// credential of its own under the system manager (else by its path), and a local repository is
// made writable for restic's lock on it.
func copySource(cfg jobunit.Config, job model.Job, spec *systemd.Spec) engine.Job {
	_, src := jobunit.Spec(cfg, job, "", false)
	if cfg.Runner != nil && cfg.Runner.SystemManager() {
		spec.LoadCredentials = append(spec.LoadCredentials, systemd.Credential{Name: credentials.FromPassword, Path: job.PasswordFile})
	}
	if dir, local := ledger.Local(job.ResticRepository()); local && spec.Sandbox != nil {
		spec.Sandbox.ReadWritePaths = append(spec.Sandbox.ReadWritePaths, dir)
	}
	return src
}
