package reconcile

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/setting"
)

// The daemon's policy on who jobs run as, by default. Whoever can write holdfast's database
// chooses what the root daemon starts and as whom; the policy is the host's own say in it.
const (
	// AnyUser in AllowUsers lets jobs run as every user.
	AnyUser = "*"
	// DefaultAllowUsers lets jobs run as every user, root included (a job that names no user
	// runs as root): restic jobs back up whatever their user can read.
	DefaultAllowUsers = AnyUser
	// DefaultAllowCommandJobs keeps command jobs from running: they run any program, as root
	// unless they name a user, so a daemon must opt in.
	DefaultAllowCommandJobs = false
)

// ValidatePolicy checks AllowUsers (names of users of this host, or numeric uids, or AnyUser)
// and resolves it; an empty list is DefaultAllowUsers. Validate and ValidateFlags call it.
func (c *Config) ValidatePolicy() error {
	if len(c.AllowUsers) == 0 {
		c.AllowUsers = []string{DefaultAllowUsers}
	}
	c.allowedUIDs = map[uint32]bool{}
	for _, u := range c.AllowUsers {
		u = strings.TrimSpace(u)
		if u == AnyUser {
			c.allowedUIDs = nil
			return nil
		}
		uid, err := resolveUser(u)
		if err != nil {
			return fmt.Errorf("%s: %w: give names of users of this host or numeric uids, comma-separated, or %s for every user", c.name("AllowUsers"), err, AnyUser)
		}
		c.allowedUIDs[uid] = true
	}
	return nil
}

// resolveUser returns the uid of a user name or a numeric uid, as systemd's User= reads them.
func resolveUser(name string) (uint32, error) {
	if name == "" {
		return 0, errors.New("an empty user name")
	}
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		if n == 1<<32-1 {
			return 0, fmt.Errorf("uid %s is not a valid user", name)
		}
		return uint32(n), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("user %q does not exist on this host", name)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("user %q has uid %q, which is not a number", name, u.Uid)
	}
	return uint32(uid), nil
}

// policyRefusal says why the daemon's policy forbids a run of job, or "" if it allows it. It is
// checked where a run is about to be spawned, so a job written to the database by anyone is
// held to the policy of the host that would run it.
func (r *Reconciler) policyRefusal(job model.Job) string {
	if job.Engine == engine.NameCommand && !r.cfg.AllowCommandJobs {
		return fmt.Sprintf("refused by this daemon's policy: job %s is a command job (it runs any program, as %s), and command jobs are not allowed here; start the daemon with %s to allow them",
			job.Name, userOrRoot(job.User), r.cfg.name("AllowCommandJobs"))
	}
	if r.cfg.allowedUIDs == nil {
		return ""
	}
	name := job.User
	if name == "" {
		name = "root" // the unit runs as the system manager's own user
	}
	uid, err := resolveUser(name)
	if err != nil {
		return fmt.Sprintf("refused by this daemon's policy: job %s runs as %s, and %s, so %s (%s) cannot allow it",
			job.Name, name, err, r.cfg.name("AllowUsers"), strings.Join(r.cfg.AllowUsers, ","))
	}
	if r.cfg.allowedUIDs[uid] {
		return ""
	}
	allow := r.cfg.name("AllowUsers")
	return setting.Sprintf("refused by this daemon's policy: job %s runs as %s (uid %d), which %s (%s) does not include; add it to the daemon's %s, or give the job an allowed {Job.User}",
		job.Name, userOrRoot(job.User), uid, allow, strings.Join(r.cfg.AllowUsers, ","), allow)
}

func userOrRoot(u string) string {
	if u == "" {
		return setting.Render("root (it names no {Job.User})")
	}
	return u
}
