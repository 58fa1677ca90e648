package setup

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/setting"
)

// maxDSN bounds an address read from a file or standard input.
const maxDSN = 16 << 10

// StdinDSN is the address given that means "read the address from standard input".
const StdinDSN = "-"

// DSNFrom returns the address of a database given to setup in one of three ways: arg as it is
// (given on the command line, which every user of the host sees in ps), arg StdinDSN (the
// address is read from stdin), or the file at file (Setup.DSNFile), which
// holds the address alone on one line and is read only if no one but root and this user could
// have written it (credentials.ReadTrusted). An error never quotes what was read.
func DSNFrom(arg string, given bool, file string, stdin io.Reader) (string, error) {
	var from string
	var r io.Reader
	switch {
	case given && file != "":
		return "", setting.Errorf("give the address with {Setup.DSN} or with {Setup.DSNFile}, not both")
	case file != "":
		// The address names the database the daemon (root) obeys: the file must be root's word.
		data, err := credentials.ReadTrusted(file, maxDSN)
		if errors.Is(err, credentials.ErrTooLarge) {
			return "", fmt.Errorf("%s holds more than %d KiB: it should hold the database's address alone", file, maxDSN>>10)
		}
		if err != nil {
			return "", err
		}
		from, r = file, bytes.NewReader(data)
	case given && arg == StdinDSN:
		from, r = "standard input", stdin
	case given:
		if arg == "" {
			return "", setting.Errorf("{Setup.DSN} is empty: give the address of the database")
		}
		return arg, nil
	default:
		return "", nil
	}
	data, err := io.ReadAll(io.LimitReader(r, maxDSN+1))
	if err != nil {
		return "", fmt.Errorf("read the address from %s: %w", from, err)
	}
	if len(data) > maxDSN {
		return "", fmt.Errorf("%s holds more than %d KiB: it should hold the database's address alone", from, maxDSN>>10)
	}
	dsn := string(bytes.TrimSpace(data))
	switch {
	case dsn == "":
		return "", fmt.Errorf("%s holds no address", from)
	case bytes.ContainsAny([]byte(dsn), "\n\r"):
		return "", fmt.Errorf("%s holds more than one line: it should hold the database's address alone", from)
	}
	return dsn, nil
}
