package model

import (
	"time"
)

// JobFigures are one job's figures for metrics.
type JobFigures struct {
	Name           string
	LastSuccess    *time.Time // when its last succeeded backup ended
	LastRunEnd     *time.Time // when its last run ended, however
	LastBytesAdded *int64     // what its last ended backup added, if known
	Overdue        bool
	Snapshots      int64 // in holdfast's inventory of its repository, not forgotten
	// LastVerifySuccess and LastRestoreSuccess are when its last succeeded verification and
	// restore ended; LastVerifyOK whether its last ended verification succeeded (nil: none ended).
	LastVerifySuccess  *time.Time
	LastVerifyOK       *bool
	LastRestoreSuccess *time.Time
}

// Figures are what every daemon's metrics read from the database at a scrape, so that all of
// them answer the same.
type Figures struct {
	Jobs     []JobFigures
	Live     map[string]int64 // live runs by status
	Accounts []Account
	// Deliveries of notifications waiting to be sent, and kept as failed.
	DeliveriesPending, DeliveriesFailed int64
}
