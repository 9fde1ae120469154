package executor_test

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gb "github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor"
	"github.com/gloveboxhq/glovebox/executor/client"
)

// Fault tests: real executor processes on one real PostgreSQL, clients
// working on sessions, paused approvals and plain evals while an
// executor is killed, the database restarts, or both executors are
// restarted in turn. Each is counted on this side: every tool call a
// client answers is recorded by id, and a session's guest keeps the ids
// of the evals applied to it, so at the end nothing completed is missing
// and nothing ran twice. Clients share keys in groups of perKey (the
// issue's 200 clients on 50 keys by default), racing each through both
// executors. About a minute on 2 cores: `make fault` runs them
// (GLOVEBOX_FAULT=1); GLOVEBOX_FAULT_CLIENTS sets the clients (200).

func requireFault(t *testing.T) {
	if os.Getenv("GLOVEBOX_FAULT") == "" {
		t.Skip("fault tests (executor processes killed and restarted, minutes) run with make fault (GLOVEBOX_FAULT=1)")
	}
}

// faultFleet is two executor processes on fixed loopback ports (a
// restarted one comes back at the same address, as behind a Service).
type faultFleet struct {
	t     *testing.T
	setup *procSetup
	ports [2]int
	procs [2]*proc
	evs   [2][2]*client.Evaluator // [executor][tenant]
	cls   [2][2]*client.Client
	rt    *gb.Runtime
	hits  ledger
}

// ledger counts tool calls by id.
type ledger struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *ledger) hit(id string) {
	l.mu.Lock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[id]++
	l.mu.Unlock()
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[id]
}

func (l *ledger) total() (calls, twice int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.n {
		calls += n
		if n > 1 {
			twice++
		}
	}
	return calls, twice
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func newFaultFleet(t *testing.T, url string) *faultFleet {
	f := &faultFleet{t: t, setup: newProcSetup(t, 1)}
	key := filepath.Join(f.setup.dir, "state.key")
	sec := make([]byte, 32)
	for i := range sec {
		sec[i] = byte(i*7 + 3)
	}
	os.WriteFile(key, []byte(hex.EncodeToString(sec)+"\n"), 0o600)
	f.setup.store = url
	f.setup.extra = []string{"--evals", "--state-key", key, "--eval-pool=-1", "--eval-sessions=1000", "--drain", "30s"}
	var ts gb.Toolset
	ts.Add("bump", func(ctx context.Context, a gb.Args) (any, error) {
		id := fmt.Sprint(a.Positional...)
		f.hits.hit(id)
		return id, nil
	})
	ts.Add("charge", func(ctx context.Context, a gb.Args) (any, error) {
		id := fmt.Sprint(a.Positional...)
		f.hits.hit(id)
		return "charged " + id, nil
	})
	rt, err := gb.New(context.Background(), gb.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	f.rt = rt
	for i := range f.ports {
		f.ports[i] = freePort(t)
		f.start(i)
		for tn, tok := range []string{f.setup.toks.a, f.setup.toks.b} {
			f.cls[i][tn] = f.setup.client(t, "https://"+f.procs[i].url, tok)
			f.evs[i][tn] = f.cls[i][tn].Evaluator(rt)
		}
	}
	return f
}

// start starts executor i at its port.
func (f *faultFleet) start(i int) {
	s := *f.setup
	s.extra = append(append([]string(nil), f.setup.extra...), "--listen", "127.0.0.1:"+strconv.Itoa(f.ports[i]))
	f.procs[i] = s.start(f.t)
}

// kill9 SIGKILLs executor i's process group alone.
func (f *faultFleet) kill9(i int) {
	p := f.procs[i]
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// term SIGTERMs executor i and waits for it to exit (drained).
func (f *faultFleet) term(i int) {
	p := f.procs[i]
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		f.t.Errorf("executor %d exited %d after SIGTERM: %s", i, code, p.stderr.String())
	}
}

// ready reports executor i's /readyz.
func (f *faultFleet) ready(i int) bool {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.setup.pool}}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + f.procs[i].url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// outcome is one operation's end.
type outcome int

const (
	done outcome = iota
	lost
)

// tally counts the operations of a run: each id (one key's work) once,
// however many clients reported it; notes counts the clients' reports.
type tally struct {
	mu              sync.Mutex
	done, lost, bad int
	notes           int
	ids             map[string]outcome
	errs            []string
	why             map[string]int // lost operations by error code
}

// note records a client's outcome for id; clients sharing the id's key
// must all report the same one (the key's one record).
func (ta *tally) note(id string, o outcome, err error) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.ids == nil {
		ta.ids, ta.why = map[string]outcome{}, map[string]int{}
	}
	ta.notes++
	if was, ok := ta.ids[id]; ok {
		if was != o {
			ta.bad++
			ta.errs = append(ta.errs, fmt.Sprintf("%s: clients of one key saw different outcomes (%v and %v: %v)", id, was, o, err))
		}
		return
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		ta.why[ce.Code]++
	}
	ta.ids[id] = o
	if o == done {
		ta.done++
	} else {
		ta.lost++
	}
}

func (ta *tally) fail(format string, args ...any) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.bad++
	if len(ta.errs) < 20 {
		ta.errs = append(ta.errs, fmt.Sprintf(format, args...))
	}
}

// finished is the operations the clients have reported.
func (ta *tally) finished() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.notes
}

// settle runs op through one executor, then the other, until an answer
// that is not "try again": a transport failure or an eval in doubt, an
// executor draining or holding the key, a full queue, a store refusal
// before anything was recorded. It returns the last error otherwise.
func (f *faultFleet) settle(ctx context.Context, first, tenant int, key string, op func(e *client.Evaluator) (*gb.Result, error)) (*gb.Result, error) {
	deadline := time.Now().Add(4 * time.Minute)
	readFinal := false
	for i := first; ; i++ {
		e := f.evs[i%2][tenant]
		res, err := op(e)
		if err == nil {
			return res, nil
		}
		var ce *client.Error
		if !errors.As(err, &ce) || time.Now().After(deadline) {
			return nil, err
		}
		again := ce.InDoubt() || ce.Code == "transport" || ce.Code == "unavailable" || ce.Code == "queue_full"
		if (ce.Code == "internal" || ce.Code == "store_failed") && key != "" {
			// A refusal (the store was down), or a final record the
			// store did not take yet (the executor writes it again
			// until it does), unless the key's record is final: the
			// same key may go again either way, it never runs twice.
			// Once final, one more try reads it (another client of the
			// key may have run it), and its answer stands.
			st, _, serr := f.cls[i%2][tenant].State(ctx, key)
			again = serr != nil || st == "queued" || st == "running" || !readFinal
			readFinal = readFinal || serr == nil && st != "queued" && st != "running"
		}
		if !again {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lostCode reports whether err is an eval that ended lost.
func lostCode(err error) bool {
	var ce *client.Error
	return errors.As(err, &ce) && (ce.Code == "lost" || ce.Code == "store_failed" || ce.Code == "internal")
}

// perKey is how many clients share each key of a workload: the issue's
// 200 clients on 50 keys.
const perKey = 4

// workload runs clients in groups of perKey sharing their keys (a
// quarter of the groups on a session, a quarter on paused approvals, a
// quarter on a session whose every eval pauses for approval, a quarter
// on plain evals, alternating tenants), each group's clients starting on
// alternate executors, so every key is raced by clients on both; each
// client does steps operations. It returns once all are started; the
// WaitGroup ends when all are done.
func (f *faultFleet) workload(ctx context.Context, clients, steps int, ta *tally) *sync.WaitGroup {
	var wg sync.WaitGroup
	groups := max(clients/perKey, 1)
	shared := make([]*groupSession, groups)
	pauses := make([]*pausedSessions, groups)
	for g := range shared {
		shared[g] = &groupSession{made: make(chan struct{})}
		pauses[g] = &pausedSessions{ids: map[int]string{}}
	}
	for c := range clients {
		g, m := c%groups, c/groups
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch g % 4 {
			case 0:
				f.sessionClient(ctx, g, m, steps, ta, shared[g])
			case 1:
				f.approvalClient(ctx, g, m, steps, ta)
			case 2:
				f.pausedSessionClient(ctx, g, m, steps, ta, pauses[g])
			default:
				f.plainClient(ctx, g, m, steps, ta)
			}
		}()
	}
	return &wg
}

// groupSession is the session a group's clients share: the first makes
// it, the others wait for it.
type groupSession struct {
	once sync.Once
	made chan struct{}
	id   string
	err  error
}

func (f *faultFleet) sessionClient(ctx context.Context, g, m, steps int, ta *tally, gs *groupSession) {
	tn := g % 2
	gs.once.Do(func() {
		defer close(gs.made)
		_, gs.err = f.settle(ctx, g, tn, "", func(e *client.Evaluator) (*gb.Result, error) {
			s, err := e.NewSession(ctx)
			if err == nil {
				gs.id = s.ID()
			}
			return nil, err
		})
	})
	<-gs.made
	if gs.err != nil {
		ta.fail("group %d client %d: new session: %v", g, m, gs.err)
		return
	}
	var completed, gone []string
	for i := range steps {
		id := fmt.Sprintf("s%d:%d", g, i)
		key := fmt.Sprintf("e-s-%d-%d", g, i)
		code := fmt.Sprintf(`($ids ||= []) << %q; bump(%q); $ids`, id, id)
		res, err := f.settle(ctx, g+m+i, tn, key, func(e *client.Evaluator) (*gb.Result, error) {
			return e.Attach(gs.id).EvalWith(ctx, code, client.EvalOptions{Key: key})
		})
		switch {
		case err == nil && res.Status == gb.StatusOK:
			completed = append(completed, id)
			ta.note(id, done, nil)
			f.checkApplied(ta, g, res.Value, completed, gone)
		case lostCode(err):
			gone = append(gone, id)
			ta.note(id, lost, err)
		default:
			ta.fail("group %d client %d step %d: %v %v", g, m, i, res, err)
		}
	}
}

// checkApplied checks a session's list of applied ids: every completed
// eval's id in it (nothing lost), none twice, none that neither
// completed nor was lost.
func (f *faultFleet) checkApplied(ta *tally, w int, v any, completed, gone []string) {
	list, _ := v.([]any)
	seen := map[string]bool{}
	for _, x := range list {
		id := fmt.Sprint(x)
		if seen[id] {
			ta.fail("client %d: %s applied twice to its session: %v", w, id, list)
		}
		seen[id] = true
	}
	for _, id := range completed {
		if !seen[id] {
			ta.fail("client %d: completed eval %s missing from its session: %v", w, id, list)
		}
	}
	known := map[string]bool{}
	for _, id := range append(append([]string(nil), completed...), gone...) {
		known[id] = true
	}
	for id := range seen {
		if !known[id] {
			ta.fail("client %d: session holds %s, never sent", w, id)
		}
	}
}

// pausedSessions are the sessions of a group whose evals pause: step i
// runs in ids[i], the session of step i-1 unless that one was left
// paused for good (its continuation lost after claiming the pause, or
// its pausing eval lost after storing it): then a new one.
type pausedSessions struct {
	mu  sync.Mutex
	ids map[int]string
}

// at returns step i's session, making one if the group's first client
// there finds it new.
func (f *faultFleet) pausedSessionAt(ctx context.Context, ps *pausedSessions, g, i int, fresh bool) (string, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if id, ok := ps.ids[i]; ok {
		return id, nil
	}
	if id, ok := ps.ids[i-1]; ok && !fresh {
		ps.ids[i] = id
		return id, nil
	}
	var id string
	_, err := f.settle(ctx, g+i, g%2, "", func(e *client.Evaluator) (*gb.Result, error) {
		s, err := e.NewSession(ctx)
		if err == nil {
			id = s.ID()
		}
		return nil, err
	})
	if err == nil {
		ps.ids[i] = id
	}
	return id, err
}

func (f *faultFleet) pausedSessionClient(ctx context.Context, g, m, steps int, ta *tally, ps *pausedSessions) {
	tn := g % 2
	var completed, gone []string
	fresh, sid := false, ""
	for i := range steps {
		id := fmt.Sprintf("ps%d:%d", g, i)
		key := fmt.Sprintf("e-ps-%d-%d", g, i)
		s, err := f.pausedSessionAt(ctx, ps, g, i, fresh)
		if err != nil {
			ta.fail("group %d client %d: new session: %v", g, m, err)
			return
		}
		if s != sid {
			sid, completed, gone = s, nil, nil
		}
		fresh = false
		code := fmt.Sprintf(`($ids ||= []) << %q; charge(%q); $ids`, id, id)
		res, err := f.settle(ctx, g+m+i, tn, key, func(e *client.Evaluator) (*gb.Result, error) {
			return e.Attach(sid).EvalWith(ctx, code, client.EvalOptions{Key: key, Suspend: []string{"charge"}})
		})
		var ce *client.Error
		switch {
		case errors.As(err, &ce) && ce.Code == "session_paused":
			ta.note(id, lost, err) // an earlier eval left it paused for good
			fresh = true
			continue
		case lostCode(err):
			gone = append(gone, id)
			ta.note(id, lost, err)
			fresh = true // it may have stored its pause before it was lost
			continue
		case err != nil || res.Status != gb.StatusSuspended:
			ta.fail("group %d client %d step %d: want suspended: %v %v", g, m, i, res, err)
			continue
		}
		for attempt := 1; ; attempt++ {
			ckey := fmt.Sprintf("%s-c%d", key, attempt)
			res, err = f.settle(ctx, g+m+i+1, tn, ckey, func(e *client.Evaluator) (*gb.Result, error) {
				return e.Continue(ctx, key, client.Answer{Approve: true}, client.EvalOptions{Key: ckey})
			})
			switch {
			case err == nil && res.Status == gb.StatusOK:
				completed = append(completed, id)
				ta.note(id, done, nil)
				f.checkApplied(ta, g, res.Value, completed, gone)
			case lostCode(err) && attempt < 3:
				continue
			case errors.As(err, &ce) && ce.Code == "already_continued" || lostCode(err):
				gone = append(gone, id)
				ta.note(id, lost, err)
				fresh = true // claimed by a lost continuation: paused for good
			default:
				ta.fail("group %d client %d step %d: continue: %v %v", g, m, i, res, err)
			}
			break
		}
	}
}

func (f *faultFleet) approvalClient(ctx context.Context, g, m, steps int, ta *tally) {
	tn := g % 2
	for i := range steps {
		id := fmt.Sprintf("a%d:%d", g, i)
		key := fmt.Sprintf("e-a-%d-%d", g, i)
		code := fmt.Sprintf(`r = charge(%q); "ok #{r}"`, id)
		res, err := f.settle(ctx, g+m+i, tn, key, func(e *client.Evaluator) (*gb.Result, error) {
			return e.EvalWith(ctx, code, client.EvalOptions{Key: key, Suspend: []string{"charge"}})
		})
		if lostCode(err) {
			ta.note(id, lost, err)
			continue
		}
		if err != nil || res.Status != gb.StatusSuspended {
			ta.fail("group %d client %d step %d: want suspended: %v %v", g, m, i, res, err)
			continue
		}
		// The answer arrives through the other executor; the group's
		// clients all send it, under one continuation key per attempt.
		for attempt := 1; ; attempt++ {
			ckey := fmt.Sprintf("%s-c%d", key, attempt)
			res, err = f.settle(ctx, g+m+i+1, tn, ckey, func(e *client.Evaluator) (*gb.Result, error) {
				return e.Continue(ctx, key, client.Answer{Approve: true}, client.EvalOptions{Key: ckey})
			})
			var ce *client.Error
			switch {
			case err == nil && res.Value == "ok charged "+id:
				ta.note(id, done, nil)
			case lostCode(err) && attempt < 3:
				continue // lost: a new continuation finds it answered, or answers it if the lost one never claimed it
			case errors.As(err, &ce) && ce.Code == "already_continued" || lostCode(err):
				ta.note(id, lost, err)
			default:
				ta.fail("group %d client %d step %d: continue: %v %v", g, m, i, res, err)
			}
			break
		}
	}
}

func (f *faultFleet) plainClient(ctx context.Context, g, m, steps int, ta *tally) {
	tn := g % 2
	for i := range steps {
		id := fmt.Sprintf("p%d:%d", g, i)
		key := fmt.Sprintf("e-p-%d-%d", g, i)
		res, err := f.settle(ctx, g+m+i, tn, key, func(e *client.Evaluator) (*gb.Result, error) {
			return e.EvalWith(ctx, fmt.Sprintf("bump(%q)", id), client.EvalOptions{Key: key})
		})
		switch {
		case err == nil && res.Value == id:
			ta.note(id, done, nil)
		case lostCode(err):
			ta.note(id, lost, err)
		default:
			ta.fail("group %d client %d step %d: %v %v", g, m, i, res, err)
		}
	}
}

// verify checks the tally against the host-side counts and logs them.
func (f *faultFleet) verify(ta *tally, what string) {
	t := f.t
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, e := range ta.errs {
		t.Error(e)
	}
	for id, o := range ta.ids {
		n := f.hits.count(id)
		if o == done && n != 1 {
			t.Errorf("%s completed with its tool run %d times", id, n)
		}
		if n > 1 {
			t.Errorf("%s: tool ran %d times", id, n)
		}
	}
	if t.Failed() {
		for i, p := range f.procs {
			os.WriteFile(filepath.Join(os.TempDir(), fmt.Sprintf("fault-%s-%d.log", t.Name(), i)), []byte(p.stderr.String()), 0o644)
		}
	}
	calls, twice := f.hits.total()
	t.Logf("%s: %d operations completed, %d lost (by code: %v), %d failed; %d tool calls counted on the host, %d ids run twice",
		what, ta.done, ta.lost, ta.why, ta.bad, calls, twice)
}

func faultClients() int {
	if n, err := strconv.Atoi(os.Getenv("GLOVEBOX_FAULT_CLIENTS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// TestFaultKillOneExecutor: kill -9 one of two executors while clients
// work; the other serves everything from then on.
func TestFaultKillOneExecutor(t *testing.T) {
	requireFault(t)
	url := executor.StartPostgres(t)
	f := newFaultFleet(t, url)
	clients, steps := faultClients(), 6
	ta := &tally{}
	wg := f.workload(context.Background(), clients, steps, ta)
	waitFor(t, func() bool { return ta.finished() >= clients*steps/3 })
	f.kill9(0)
	t.Logf("executor 0 killed after %d operations", ta.finished())
	wg.Wait()
	f.verify(ta, fmt.Sprintf("kill -9 (%d clients × %d steps)", clients, steps))
}

// TestFaultRestartPostgres: PostgreSQL stops mid-run; both executors
// report not ready, then ready again once it is back, and the clients'
// work goes on.
func TestFaultRestartPostgres(t *testing.T) {
	requireFault(t)
	url, stop, start := executor.StartPostgresCtl(t)
	f := newFaultFleet(t, url)
	clients, steps := faultClients(), 6
	ta := &tally{}
	wg := f.workload(context.Background(), clients, steps, ta)
	waitFor(t, func() bool { return ta.finished() >= clients*steps/3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !f.ready(0) && !f.ready(1) })
	t.Logf("PostgreSQL stopped after %d operations; both executors not ready", ta.finished())
	if err := start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return f.ready(0) && f.ready(1) })
	t.Logf("PostgreSQL back; both executors ready")
	wg.Wait()
	f.verify(ta, fmt.Sprintf("PostgreSQL restart (%d clients × %d steps)", clients, steps))
}

// TestFaultRollingRestart: both executors are restarted in turn (SIGTERM,
// drain, start again) while a client keeps a session and a paused
// approval, and others work; the session keeps its state, the approval
// is answered once, after both restarts.
func TestFaultRollingRestart(t *testing.T) {
	requireFault(t)
	url := executor.StartPostgres(t)
	f := newFaultFleet(t, url)
	ctx := context.Background()
	s, err := f.evs[0][0].NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Eval(ctx, `$kept = "before"; bump("kept:0")`); err != nil || res.Status != gb.StatusOK {
		t.Fatal(res, err)
	}
	res, err := f.evs[0][0].EvalWith(ctx, `r = charge("kept:pay"); "ok #{r}"`, client.EvalOptions{Key: "e-roll-pay", Suspend: []string{"charge"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("paused approval: %v %v", res, err)
	}
	// A session paused in an approval, kept across both restarts too.
	ps, err := f.evs[1][0].NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = ps.EvalWith(ctx, `$pre = "kept"; r = charge("kept:spay"); "#{$pre} #{r}"`, client.EvalOptions{Key: "e-roll-spay", Suspend: []string{"charge"}})
	if err != nil || res.Status != gb.StatusSuspended {
		t.Fatalf("paused session: %v %v", res, err)
	}
	clients, steps := max(faultClients()/2, 3), 6
	ta := &tally{}
	wg := f.workload(ctx, clients, steps, ta)
	var restarts atomic.Int64
	for i := range 2 {
		waitFor(t, func() bool { return ta.finished() >= clients*steps*(i+1)/3 })
		f.term(i)
		f.start(i)
		restarts.Add(1)
		// The kept session, through the executor not restarted just now.
		res, err := f.settle(ctx, 1-i, 0, "", func(e *client.Evaluator) (*gb.Result, error) {
			return e.Attach(s.ID()).Eval(ctx, "$kept")
		})
		if err != nil || res.Value != "before" {
			t.Errorf("the kept session after restarting executor %d: %v %v", i, res, err)
		}
	}
	res, err = f.settle(ctx, 1, 0, "e-roll-pay-c", func(e *client.Evaluator) (*gb.Result, error) {
		return e.Continue(ctx, "e-roll-pay", client.Answer{Approve: true}, client.EvalOptions{Key: "e-roll-pay-c"})
	})
	if err != nil || res.Value != "ok charged kept:pay" || f.hits.count("kept:pay") != 1 {
		t.Errorf("the paused approval after both restarts: %v %v (charged %d times)", res, err, f.hits.count("kept:pay"))
	}
	res, err = f.settle(ctx, 0, 0, "e-roll-spay-c", func(e *client.Evaluator) (*gb.Result, error) {
		return e.Continue(ctx, "e-roll-spay", client.Answer{Approve: true}, client.EvalOptions{Key: "e-roll-spay-c"})
	})
	if err != nil || res.Value != "kept charged kept:spay" || f.hits.count("kept:spay") != 1 {
		t.Errorf("the paused session after both restarts: %v %v (charged %d times)", res, err, f.hits.count("kept:spay"))
	}
	res, err = f.settle(ctx, 1, 0, "", func(e *client.Evaluator) (*gb.Result, error) {
		return e.Attach(ps.ID()).Eval(ctx, "$pre")
	})
	if err != nil || res.Value != "kept" {
		t.Errorf("the paused session's next eval: %v %v", res, err)
	}
	wg.Wait()
	if !strings.Contains(f.procs[0].stderr.String(), "listening") {
		t.Error("executor 0 did not come back")
	}
	f.verify(ta, fmt.Sprintf("rolling restart of both executors (%d clients × %d steps)", clients, steps))
}
