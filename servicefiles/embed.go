// Package servicefiles holds the daemon's own systemd unit and the files that set up its state
// directory, for the packages and for tests that check them.
package servicefiles

import _ "embed"

//go:embed holdfast.service
var Service string

//go:embed holdfast.tmpfiles
var Tmpfiles string
