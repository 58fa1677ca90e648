package model

// CopySettings are a job's copy repository, which each snapshot of a backup is copied into by
// a run of kind copy (KindCopy).
type CopySettings struct {
	// To, if set, is the copy repository, with its own password file and (optional)
	// environment file ("" the job's).
	To           string
	PasswordFile string
	EnvFile      string
}

// AsCopy is the job as its copy repository's: the same job, with the copy's repository,
// password file and environment file; ok is false if the job has none. The units, the
// inventory and retention of the copy repository see it so.
func (j Job) AsCopy() (copy Job, ok bool) {
	if j.Copy.To == "" {
		return Job{}, false
	}
	copy = j
	copy.Repository, copy.PasswordFile = j.Copy.To, j.Copy.PasswordFile
	if j.Copy.EnvFile != "" {
		copy.EnvFile = j.Copy.EnvFile // else the job's: restic copy reads one environment for both
	}
	copy.Copy = CopySettings{}
	return copy, true
}
