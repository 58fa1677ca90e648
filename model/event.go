package model

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Event is one entry of the outbox.
type Event struct {
	ID      uuid.UUID
	Seq     int64
	Event   string
	Job     string
	Run     *uuid.UUID
	Attempt *int
	Status  string
	Reason  string
	At      time.Time
	Host    string
	Details json.RawMessage
}

// The kinds of notification target.
const (
	TargetWebhook      = "webhook"
	TargetHealthchecks = "healthchecks"
	TargetCommand      = "command"
	TargetChannel      = "channel" // a chat, push or mail service by URL; the URL is in SecretFile
)

// Target is where events are sent.
type Target struct {
	Name       string
	Kind       string
	URL        string   // webhook, healthchecks; channel: only the scheme and host, for display
	SecretFile string   // webhook: the HMAC key's file; channel: the file of the service's URL; root's
	Command    []string // command: argv
	Job        string   // "" every job
	Events     []string
	CreatedAt  time.Time
}

// Delivery is one event for one target.
type Delivery struct {
	Event       Event
	Target      Target
	State       string
	Tries       int // including the one under way, for a claimed delivery
	NextAt      time.Time
	LastError   string
	DeliveredAt *time.Time
}
