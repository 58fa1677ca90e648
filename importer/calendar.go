package importer

import (
	"fmt"
	"strconv"
	"strings"
)

// cronOf converts a systemd calendar expression (OnCalendar=, which resticprofile's schedules
// are) to holdfast's cron: the shorthands ("daily"), and a time of day ("02:30", "*:0/15",
// "*-*-* 03:15:00") on every day or on weekdays ("Mon..Fri 02:00", "Sat,Sun *-*-* 04:00").
// ok is false for what has no exact cron form here (a date, seconds, a year, a range of
// hours): the caller says so.
func cronOf(calendar string) (cron string, ok bool) {
	s := strings.Join(strings.Fields(calendar), " ")
	switch strings.ToLower(s) {
	case "minutely":
		return "* * * * *", true
	case "hourly":
		return "@hourly", true
	case "daily":
		return "@daily", true
	case "weekly":
		return "0 0 * * 1", true // systemd's week starts on Monday, cron's @weekly on Sunday
	case "monthly":
		return "@monthly", true
	case "yearly", "annually":
		return "@yearly", true
	}
	fields := strings.Fields(s)
	dow := "*"
	if len(fields) > 0 && strings.ContainsAny(fields[0][:1], "MTWFSmtwfs") {
		d, ok := weekdays(fields[0])
		if !ok {
			return "", false
		}
		dow, fields = d, fields[1:]
	}
	if len(fields) == 2 {
		if fields[0] != "*-*-*" {
			return "", false // a date: no cron of minutes and hours says it
		}
		fields = fields[1:]
	}
	if len(fields) != 1 {
		return "", false
	}
	parts := strings.Split(fields[0], ":")
	if len(parts) == 3 {
		if parts[2] != "0" && parts[2] != "00" {
			return "", false // seconds
		}
		parts = parts[:2]
	}
	if len(parts) != 2 {
		return "", false
	}
	hour, okH := cronField(parts[0], 23)
	minute, okM := cronField(parts[1], 59)
	if !okH || !okM {
		return "", false
	}
	return fmt.Sprintf("%s %s * * %s", minute, hour, dow), true
}

// cronField converts one field of a time: a number, "*", a list of numbers, or "start/step".
func cronField(f string, limit int) (string, bool) {
	if f == "*" {
		return "*", true
	}
	if start, step, isStep := strings.Cut(f, "/"); isStep {
		s, err1 := strconv.Atoi(start)
		n, err2 := strconv.Atoi(step)
		if err1 != nil || err2 != nil || s < 0 || s > limit || n < 1 {
			return "", false
		}
		if s == 0 {
			return "*/" + step, true
		}
		return fmt.Sprintf("%d-%d/%d", s, limit, n), true
	}
	var out []string
	for _, e := range strings.Split(f, ",") {
		n, err := strconv.Atoi(e)
		if err != nil || n < 0 || n > limit {
			return "", false
		}
		out = append(out, strconv.Itoa(n))
	}
	return strings.Join(out, ","), true
}

// days are the week's days as systemd names them, in cron's numbering (Sunday 0).
var days = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	"sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6}

// weekdays converts systemd's days ("Mon", "Mon..Fri", "Mon-Fri", "Sat,Sun") to cron's. A range
// runs forward within the week, from Monday: systemd refuses one that wraps ("Fri..Mon").
func weekdays(f string) (string, bool) {
	var out []string
	for _, part := range strings.Split(f, ",") {
		from, to, isRange := strings.Cut(part, "..")
		if !isRange {
			from, to, isRange = strings.Cut(part, "-")
		}
		a, okA := days[strings.ToLower(from)]
		if !okA {
			return "", false
		}
		if !isRange {
			out = append(out, strconv.Itoa(a))
			continue
		}
		b, okB := days[strings.ToLower(to)]
		// systemd's week is Monday to Sunday: Sunday is its last day, cron's 0.
		if !okB || (a+6)%7 > (b+6)%7 {
			return "", false
		}
		for d := a; ; d = (d + 1) % 7 {
			out = append(out, strconv.Itoa(d))
			if d == b {
				break
			}
		}
	}
	return strings.Join(out, ","), true
}
