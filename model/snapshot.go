package model

import (
	"time"

	"github.com/google/uuid"
)

// Snapshot is one snapshot of a repository as holdfast last saw it, with its protections.
type Snapshot struct {
	Repository string
	ID         string // restic's full id (64 hex digits); a row from a summary may have its short id
	Time       time.Time
	Host       string
	Tags       []string
	Paths      []string
	JobName    string     // from its holdfast-job tag; "" if it has none
	RunID      *uuid.UUID // from its holdfast-run tag
	// BytesAdded is what the run that made it added to the repository, if holdfast knows it:
	// an estimate of what deleting it and pruning reclaims.
	BytesAdded     *int64
	FirstSeenAt    time.Time
	SeenAt         time.Time
	ForgottenAt    *time.Time // no longer in the repository's listing
	LegalHoldAt    *time.Time
	LegalHoldBy    string
	LegalHoldWhy   string
	ImmutableUntil *time.Time
	ImmutableBy    string
	// Source says where the row's facts come from: SourceListing or SourceSummary.
	Source string
}

// Where an inventory row came from.
const (
	// SourceListing: restic listed the snapshot (a full listing, or the repair channel's
	// listing of a run's snapshot); its facts are restic's.
	SourceListing = "listing"
	// SourceSummary: a backup's own summary, recorded with the run's ending. The id is the
	// summary's (maybe restic 0.14's short id); time, host, tags and paths are what holdfast
	// knows of how it ran restic. The next listing completes the row (SnapshotSync).
	SourceSummary = "summary"
)
