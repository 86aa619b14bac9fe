//go:build linux

package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"coord/internal/leasekit"
	"coord/lease"
	"coord/lease/eventlog"

	"github.com/fsnotify/fsnotify"
)

// Watch implements lease.Backend. Nothing is polled. A watcher wakes when:
//   - a record file is linked or removed, or the lock file replaced
//     (inotify on the directory): acquire, renew, release;
//   - the holder's process dies or releases: the watcher keeps a connection
//     to the tenure socket, and the kernel ends it (EOF) when the socket
//     closes, within microseconds of the holder's death;
//   - the lease expires: a timer set to the expiry it last read (a holder
//     stopped by SIGSTOP, or in another network namespace, is not seen to
//     die, so only its TTL frees the lease);
//   - the directory itself is moved or removed: the watch follows the path
//     to whatever directory is there now.
func (b *Backend) Watch(ctx context.Context, name string) (<-chan lease.Record, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	wake, unsubscribe, err := b.subscribe(name)
	if err != nil {
		return nil, err
	}
	feed := leasekit.NewFeed()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer unsubscribe()
		defer feed.Close()
		b.watch(ctx, name, feed, wake)
	}()
	return feed.C(), nil
}

// watch is the loop of one Watch call. It sends the record when its holder,
// token or expiry changed.
func (b *Backend) watch(ctx context.Context, name string, feed *leasekit.Feed, wake <-chan struct{}) {
	var (
		deathConn net.Conn
		deathTok  uint64
		death     = make(chan net.Conn, 1)
	)
	defer func() {
		if deathConn != nil {
			deathConn.Close()
		}
	}()
	for {
		b.refreshNotify()
		v, err := b.view(ctx, name)
		if err != nil {
			b.log.Debug("lease/file: watch ends", "lease", name, "err", err)
			return
		}
		feed.Send(v.record(name), v.expiresMono)
		if deathConn != nil && (!v.held() || v.token != deathTok) {
			deathConn.Close()
			deathConn, deathTok = nil, 0
		}
		var expiry <-chan time.Time
		if v.held() {
			if deathConn == nil && v.observable && v.socket != "" {
				c, err := net.DialTimeout("unix", "@"+v.socket, 200*time.Millisecond)
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					continue // died between the assessment and now: look again
				case err != nil:
					// No evidence (a full backlog, a timeout): the
					// expiry and inotify still wake this watch.
					b.log.Debug("lease/file: watch dial failed", "err", err)
				default:
					deathConn, deathTok = c, v.token
					go func() {
						io.Copy(io.Discard, c)
						select {
						case death <- c:
						default:
						}
					}()
				}
			}
			expiry = time.After(time.Duration(v.expiresMono-eventlog.MonotonicNow()) + time.Millisecond)
		}
		var reason string
		select {
		case <-ctx.Done():
			return
		case <-b.closed:
			return
		case <-wake:
			reason = "inotify"
		case c := <-death:
			// The connection ended. The process may be dying with its
			// listener still open for a moment (the kernel closes a dead
			// process's descriptors one by one), so the next view can
			// still find it alive: connect again, and that connection ends
			// when the listener closes.
			reason = "socket closed"
			if c == deathConn {
				deathConn.Close()
				deathConn, deathTok = nil, 0
			}
		case <-expiry:
			reason = "expiry"
		}
		b.log.Debug("lease/file: watch woke", "lease", name, "reason", reason, "token", v.token, "status", v.status)
	}
}

// WatchTenure implements lease.TenureWatcher. The holder learns at once,
// from inotify, that its tenure is over when the lock directory is moved,
// removed or replaced by another at the same path, when its record files
// are removed, or when the current record is not its own any more (another
// tenure's, or one a process found without a record); not at its next
// renewal. Removing or editing the lock file, a copy for people, does not
// end a tenure (the next operation rewrites it).
func (b *Backend) WatchTenure(ctx context.Context, name string, token uint64) (<-chan error, error) {
	t := b.tenureOf(name, token)
	if t == nil {
		return nil, fmt.Errorf("lease/file: watch tenure %q token %d: %w: this Backend does not hold it", name, token, lease.ErrInvalid)
	}
	wake, unsubscribe, err := b.subscribe(name)
	if err != nil {
		return nil, err
	}
	out := make(chan error, 1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer unsubscribe()
		defer close(out)
		for {
			if why := b.checkTenure(name, token, t); why != "" {
				select {
				case <-t.ended: // ended here (Release): not news
				default:
					out <- fmt.Errorf("lease/file: %q token %d: %w: %s", name, token, lease.ErrLost, why)
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-b.closed:
				return
			case <-t.ended:
				return
			case <-wake:
			}
		}
	}()
	return out, nil
}

// checkTenure says why the tenure t of token no longer stands, or "".
func (b *Backend) checkTenure(name string, token uint64, t *tenure) string {
	s, err := b.load(name)
	if err != nil {
		if _, serr := os.Stat(b.dir); errors.Is(serr, fs.ErrNotExist) {
			return "the lock directory " + b.dir + " is gone"
		}
		return "" // no evidence; renewals will tell
	}
	defer s.close()
	switch {
	case s.dirID != t.dirID:
		return "the lock directory " + b.dir + " was moved or replaced"
	case !s.haveCur && len(s.damage) > 0:
		return "its record file is damaged: " + strings.Join(s.damage, "; ")
	case !s.haveCur:
		return "its record files were removed"
	case s.cur.Token < token:
		return fmt.Sprintf("its record was removed or damaged (the newest intact one has token %d)", s.cur.Token)
	case s.cur.Token > token:
		return fmt.Sprintf("the lease passed to %q under token %d", s.cur.Holder, s.cur.Token)
	case s.cur.Holder == "":
		return "the lease was released by another process"
	case strings.HasPrefix(s.cur.Holder, "unknown (pid "):
		return "its record was removed, and another process recorded its tenure as unknown"
	}
	return ""
}

// notifier shares one inotify instance among a Backend's watches (the
// kernel allows few instances per user) and fans its events out by name.
type notifier struct {
	w   *fsnotify.Watcher
	dir string

	mu    sync.Mutex
	subs  map[string]map[chan struct{}]struct{}
	stale bool // the directory was moved or removed: watch its path again
}

// subscribe returns a channel that is signalled whenever a file of name
// changes, and a function to unsubscribe.
func (b *Backend) subscribe(name string) (<-chan struct{}, func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.isClosed {
		return nil, nil, fmt.Errorf("lease/file: watch %q: %w", name, lease.ErrClosed)
	}
	if b.notify == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, nil, fmt.Errorf("lease/file: inotify: %w: %v", lease.ErrUnavailable, err)
		}
		if err := w.Add(b.dir); err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("lease/file: inotify on %s: %w: %v", b.dir, lease.ErrUnavailable, err)
		}
		b.notify = &notifier{w: w, dir: b.dir, subs: map[string]map[chan struct{}]struct{}{}}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.notify.run()
		}()
	}
	n := b.notify
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs[name] == nil {
		n.subs[name] = map[chan struct{}]struct{}{}
	}
	n.subs[name][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.subs[name], ch)
		n.mu.Unlock()
	}, nil
}

// refreshNotify watches the directory's path again if the directory that
// was watched was moved or removed.
func (b *Backend) refreshNotify() {
	b.mu.Lock()
	n := b.notify
	b.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stale && n.w.Add(n.dir) == nil {
		n.stale = false
	}
}

// run dispatches inotify events until the watcher is closed. An error (the
// event queue overflowed) wakes every subscriber, so none misses a change,
// and so does an event on the directory itself (moved, removed).
func (n *notifier) run() {
	for {
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				return
			}
			if filepath.Clean(ev.Name) == n.dir {
				n.mu.Lock()
				n.stale = true
				n.mu.Unlock()
				n.signal("", true)
				continue
			}
			n.signal(filepath.Base(ev.Name), false)
		case _, ok := <-n.w.Errors:
			if !ok {
				return
			}
			n.signal("", true)
		}
	}
}

// signal wakes the subscribers of the lease whose file base is, or all.
func (n *notifier) signal(base string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for subName, subs := range n.subs {
		if !all && base != subName && !strings.HasPrefix(base, "."+subName+".") {
			continue
		}
		for ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (n *notifier) close() { n.w.Close() }
