package main

import (
	"context"
	"io"

	"github.com/holdfast-backup/holdfast/store"
)

// Execute runs one command line in the calling process as the holdfast binary at binary runs
// it, with getenv as its environment, stdin as its standard input and openStore for its database,
// and returns its exit code.
func Execute(ctx context.Context, binary string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer,
	openStore func(ctx context.Context, addr store.Address) (*store.Store, func(), error)) int {
	return execute(ctx, args, environment{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, openStore: openStore,
		executable: func() (string, error) { return binary, nil }})
}

// OpenOwnStore opens a pool of the command's own, as the binary does.
var OpenOwnStore = openOwnStore
