package embednats

import (
	"fmt"
	"log/slog"
	"strings"
)

// slogAdapter sends nats-server's log to a slog.Logger.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "Plaintext passwords detected") {
		// The passwords are random, made at each start and kept in memory
		// and an owner-only file: hashing them would only slow clients.
		a.l.Debug(msg)
		return
	}
	a.l.Warn(msg)
}
func (a *slogAdapter) Fatalf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) {}
