package embednats

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// RefuseSubmitters gives every store's submitters new credentials: the
// server disconnects every client connected with the old ones, whatever
// it was doing, and refuses them from then on, while the daemon's own
// in-process connections stay. After it, no job can be queued but by a
// client that read a discovery announced since (StoreDiscovery has the
// new credentials).
//
// A daemon leaving when idle calls it once its discovery files are
// withdrawn, then looks at its queues again. The server only marks a
// cut-off connection closed before the call returns: it closes the
// socket afterwards, in the connection's own goroutine, and until then
// still takes what the submitter sends. So the daemon looks again a
// moment later, when nothing can come any more but what took longer
// than that to arrive. A submitter cut off mid-publish does not know
// whether its job was queued, and retries with the same ID through
// discovery.
func (s *Server) RefuseSubmitters() error {
	s.optsMu.Lock()
	defer s.optsMu.Unlock()
	opts := s.opts.Clone()
	// The running TLS configuration itself: a copy differs from it for
	// the reload's comparison, which would then reload TLS as well.
	opts.TLSConfig = s.opts.TLSConfig
	fresh := map[string]string{} // client user → new password
	for _, st := range s.stores {
		fresh[st.discovery.User] = secret()
	}
	for _, u := range opts.Users {
		if p, ok := fresh[u.Username]; ok {
			u.Password = p
		}
	}
	if len(opts.Accounts) > 0 {
		accounts, err := jetStreamAccounts(opts.Accounts)
		if err != nil {
			return err
		}
		opts.Accounts = accounts
	}
	if err := s.ns.ReloadOptions(opts); err != nil {
		return fmt.Errorf("refuse submitters: %w", err)
	}
	s.opts = opts
	for _, st := range s.stores {
		st.discovery.Password = fresh[st.discovery.User]
	}
	return nil
}

// jetStreamAccounts returns accounts of the same names as accts, with
// JetStream enabled on each (and its limits dynamic, as start enables
// it). A reload gives every account the JetStream settings of the
// account of its name in the options, and disables JetStream in those
// that have none: the accounts start made have none, since it enables
// JetStream after the server has started, and the server takes no
// JetStream settings for an account in Options but from a configuration.
func jetStreamAccounts(accts []*server.Account) ([]*server.Account, error) {
	var conf strings.Builder
	conf.WriteString("accounts {\n")
	for _, a := range accts {
		fmt.Fprintf(&conf, "  %s: { jetstream: enabled }\n", strconv.Quote(a.GetName()))
	}
	conf.WriteString("}\n")
	var o server.Options
	if err := o.ProcessConfigString(conf.String()); err != nil {
		return nil, fmt.Errorf("refuse submitters: accounts: %w", err)
	}
	if len(o.Accounts) != len(accts) {
		return nil, fmt.Errorf("refuse submitters: %d accounts configured, want %d", len(o.Accounts), len(accts))
	}
	return o.Accounts, nil
}
