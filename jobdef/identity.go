package jobdef

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ValidUserGroupName checks a --user or --group value the way systemd reads User= and Group=:
// a numeric id (0..4294967294, not 65535, no sign or leading zero), or a name under systemd's
// relaxed rules (no control characters, ':' or '/', no surrounding spaces, not all digits, not
// "." or "..").
func ValidUserGroupName(s string) error {
	if _, ok := parseID(s); ok {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%q is not a user or group name systemd accepts: %s; give a name such as backup or a numeric id such as 34", s, why)
	}
	switch {
	case s == "":
		return bad("it is empty")
	case strings.HasPrefix(s, " ") || strings.HasSuffix(s, " "):
		return bad("it starts or ends with a space")
	case !utf8.ValidString(s):
		return bad("it is not valid UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("it contains a control character")
	case strings.ContainsAny(s, ":/"):
		return bad("it contains ':' or '/'")
	case allDigits(s) || (s[0] == '-' && allDigits(s[1:])):
		return bad("a number must be a valid id (no sign, no leading zero, not 65535, below 4294967295)")
	case s == "." || s == "..":
		return bad("it is a directory name")
	}
	return nil
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// parseID reads a numeric user or group id as systemd's parse_uid does.
func parseID(s string) (uint32, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') || !allDigits(s) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0xFFFFFFFF || n == 0xFFFF {
		return 0, false
	}
	return uint32(n), true
}

// ErrUnknownUser means a job's user or group has no entry on this host.
var ErrUnknownUser = errors.New("unknown user or group")

// LookupUser finds a job's user by name or numeric id.
func LookupUser(s string) (*user.User, error) {
	var u *user.User
	var err error
	if _, ok := parseID(s); ok {
		u, err = user.LookupId(s)
	} else {
		u, err = user.Lookup(s)
	}
	var unknownName user.UnknownUserError
	var unknownID user.UnknownUserIdError
	if errors.As(err, &unknownName) || errors.As(err, &unknownID) {
		return nil, fmt.Errorf("user %s: %w", s, ErrUnknownUser)
	}
	return u, err
}

// LookupGroup finds a job's group by name or numeric id.
func LookupGroup(s string) (*user.Group, error) {
	var g *user.Group
	var err error
	if _, ok := parseID(s); ok {
		g, err = user.LookupGroupId(s)
	} else {
		g, err = user.LookupGroup(s)
	}
	var unknownName user.UnknownGroupError
	var unknownID user.UnknownGroupIdError
	if errors.As(err, &unknownName) || errors.As(err, &unknownID) {
		return nil, fmt.Errorf("group %s: %w", s, ErrUnknownUser)
	}
	return g, err
}

// Identity is who a job's unit runs as: what systemd sets from User= and Group=.
type Identity struct {
	Name   string // as the job names it; "" for root
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups of the user
}

// String names the identity for messages.
func (id Identity) String() string {
	if id.Name == "" {
		return "root"
	}
	return id.Name
}

// ResolveIdentity looks up the identity a job with these User= and Group= runs as. Without a
// user it is root (with the group, if given).
func ResolveIdentity(userName, groupName string) (Identity, error) {
	id := Identity{Name: userName}
	if userName != "" {
		u, err := LookupUser(userName)
		if err != nil {
			return Identity{}, err
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		id.UID, id.GID = uint32(uid), uint32(gid)
		groups, err := u.GroupIds()
		if err != nil {
			return Identity{}, fmt.Errorf("groups of user %s: %w", userName, err)
		}
		for _, g := range groups {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				id.Groups = append(id.Groups, uint32(n))
			}
		}
	}
	if groupName != "" {
		g, err := LookupGroup(groupName)
		if err != nil {
			return Identity{}, err
		}
		gid, _ := strconv.ParseUint(g.Gid, 10, 32)
		id.GID = uint32(gid)
	}
	return id, nil
}
