package embednats

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// violationEvery is how often, at most, the log gets a line about
// clients' permission violations: any submitter can make them at will,
// and must not be able to flood the daemon's log.
const violationEvery = 10 * time.Second

// slogAdapter sends nats-server's log to a slog.Logger, each line a
// record: its start-up banner's art is dropped and its "Name: value"
// lines become attributes.
type slogAdapter struct {
	l *slog.Logger
	// generated means every password the server knows is scribe's own,
	// random and made at this start: nats-server's advice to hash
	// plaintext passwords does not apply (hashing would only slow
	// clients), so it is not logged.
	generated bool
	// now is the clock (tests set it); nil means time.Now.
	now func() time.Time
	// fatal, if not nil, is told the server's first fatal error (a port
	// it cannot listen on), which does not stop the server by itself.
	fatal chan<- string

	mu         sync.Mutex
	lastLogged time.Time // of a violation line
	suppressed int       // violations not logged since
}

func (a *slogAdapter) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if key, value, ok := bannerLine(msg); ok {
		if key != "" {
			a.l.Debug("nats-server", key, value)
		}
		return
	}
	a.l.Debug(msg)
}

// bannerSetting is a "  Name:  value" line of nats-server's start-up
// banner.
var bannerSetting = regexp.MustCompile(`^\s+([A-Z][A-Za-z ]*[A-Za-z]):\s+(.*)$`)

// bannerLine reports whether msg is a line of nats-server's start-up
// banners, which are written for a terminal: for a "  Name:  value" line
// it returns the name as a record's key ("max_memory") and the value;
// for the rest (the logo, rules, blank lines, the docs' address) an empty
// key.
func bannerLine(msg string) (key, value string, ok bool) {
	if m := bannerSetting.FindStringSubmatch(msg); m != nil {
		value = m[2]
		if u, err := strconv.Unquote(value); err == nil {
			value = u
		}
		return strings.ReplaceAll(strings.ToLower(m[1]), " ", "_"), value, true
	}
	if strings.HasPrefix(msg, "-") || strings.HasPrefix(msg, " ") || !strings.ContainsFunc(msg, unicode.IsLetter) {
		return "", "", true
	}
	return "", "", false
}

func (a *slogAdapter) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if a.generated && strings.Contains(msg, "Plaintext passwords detected") {
		return
	}
	if strings.Contains(msg, `not using "TLS Handshake First"`) {
		// The daemon's choice (clients must begin with TLS), said at
		// every start: not a fault.
		a.l.Debug(msg)
		return
	}
	a.l.Warn(msg)
}
func (a *slogAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.l.Error(msg)
	select {
	case a.fatal <- msg:
	default: // none listens, or it was told one already
	}
}
func (a *slogAdapter) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if isViolation(msg) {
		a.violation(msg)
		return
	}
	a.l.Error(msg)
}
func (a *slogAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) {}

// isViolation reports whether a server error line is a client's
// permission violation ("Publish Violation - Subject …", "Subscription
// Violation - …"): the client was refused, nothing is wrong with the
// daemon.
func isViolation(msg string) bool {
	return strings.Contains(msg, "Publish Violation") || strings.Contains(msg, "Subscription Violation")
}

// violation logs a client's permission violation at WARN, at most once
// per violationEvery, with the count of those not logged since the last
// line. Each line is logged at debug level in full.
func (a *slogAdapter) violation(msg string) {
	now := time.Now
	if a.now != nil {
		now = a.now
	}
	t := now()
	a.l.Debug(msg)
	a.mu.Lock()
	if !a.lastLogged.IsZero() && t.Sub(a.lastLogged) < violationEvery {
		a.suppressed++
		a.mu.Unlock()
		return
	}
	suppressed := a.suppressed
	a.lastLogged, a.suppressed = t, 0
	a.mu.Unlock()
	a.l.Warn("a client was refused: "+msg, "suppressed_since_last", suppressed, "at_most_every", violationEvery)
}
