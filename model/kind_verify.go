package model

import "time"

// VerifySettings are when and how a job's repository is verified (KindVerify, restic check).
type VerifySettings struct {
	// Schedule is a schedule like Job.Schedule; "" never. NextAt is its next slot; ReadData the
	// part of the data each verification reads (restic's --read-data-subset, "" none);
	// AlertAfter how old the last successful verification may be before the job is overdue (0:
	// two periods of the schedule).
	Schedule   string
	NextAt     *time.Time
	ReadData   string
	AlertAfter time.Duration
	Since      *time.Time // when the schedule was set
}

// DrillSettings are when a job's restore drill runs: a run of kind verify (KindVerify) that
// restores Files files of the latest snapshot and verifies them, which counts as a
// verification.
type DrillSettings struct {
	// Schedule is a schedule like Job.Schedule; "" never. NextAt is its next slot.
	Schedule string
	NextAt   *time.Time
	Files    int
}

// VerifySchedule admits a verification of the repository (restic check, reading
// VerifySettings.ReadData of the data) at each slot of a job's verify schedule.
var VerifySchedule = RepositorySchedule{Name: "verify", Kind: KindVerify,
	Expr:   func(j Job) string { return j.Verify.Schedule },
	NextAt: func(j Job) *time.Time { return j.Verify.NextAt },
	Verify: func(j Job) Verify { return Verify{ReadDataSubset: j.Verify.ReadData} }}

// DrillSchedule admits a restore drill, a verify run that restores DrillSettings.Files files, at
// each slot of a job's drill schedule.
var DrillSchedule = RepositorySchedule{Name: "drill", Kind: KindVerify,
	Expr:   func(j Job) string { return j.Drill.Schedule },
	NextAt: func(j Job) *time.Time { return j.Drill.NextAt },
	Verify: func(j Job) Verify { return Verify{DrillFiles: j.Drill.Files} }}

// Verify is what a verify run checks.
type Verify struct {
	ReadDataSubset string // restic check --read-data-subset ("" checks the structure only)
	DrillFiles     int    // a drill restores and verifies this many files of the latest snapshot; 0 none
}
