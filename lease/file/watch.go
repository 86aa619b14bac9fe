package file

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"

	"coord/internal/leasekit"
	"coord/lease"

	"github.com/fsnotify/fsnotify"
)

// Watch implements lease.Backend. Nothing is polled. A watcher wakes when:
//   - the lock file is replaced (inotify on the directory reports the
//     exchange, or the rename, as a move):
//     acquire, renew, release, repair;
//   - the holder's process dies or releases: the watcher keeps a connection
//     to the tenure socket, and the kernel ends it (EOF) when the socket
//     closes, within microseconds of the holder's death;
//   - the lease expires: a timer set to the expiry it last read (a holder
//     stopped by SIGSTOP is alive, so only its TTL frees the lease).
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
			if deathConn == nil {
				c, err := net.DialTimeout("unix", b.sockPath(name, v.token), 200*time.Millisecond)
				if err != nil {
					b.log.Debug("lease/file: watch dial failed", "err", err)
					continue // died between the assessment and now: look again
				}
				deathConn, deathTok = c, v.token
				go func() {
					io.Copy(io.Discard, c)
					select {
					case death <- c:
					default:
					}
				}()
			}
			expiry = time.After(time.Duration(v.expiresMono-lease.MonotonicNow()) + time.Millisecond)
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

// notifier shares one inotify instance among a Backend's watches (the
// kernel allows few instances per user) and fans its events out by name.
type notifier struct {
	w *fsnotify.Watcher

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// subscribe returns a channel that is signalled whenever the lock file of
// name changes, and a function to unsubscribe.
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
		b.notify = &notifier{w: w, subs: map[string]map[chan struct{}]struct{}{}}
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

// run dispatches inotify events until the watcher is closed. An error (the
// event queue overflowed) wakes every subscriber, so none misses a change.
func (n *notifier) run() {
	for {
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				return
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

func (n *notifier) signal(name string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for subName, subs := range n.subs {
		if !all && subName != name {
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
