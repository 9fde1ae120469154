package executor

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the executor's Prometheus series, on a registry of its own
// (so two servers in one test process do not collide).
type metrics struct {
	reg      *prometheus.Registry
	jobs     *prometheus.CounterVec   // finished jobs by kind, state, backend
	refused  *prometheus.CounterVec   // refused requests by code
	queued   *prometheus.GaugeVec     // jobs waiting for a slot, by kind
	running  *prometheus.GaugeVec     // jobs executing, by kind
	duration *prometheus.HistogramVec // seconds from start on the backend to the final record
	wait     *prometheus.HistogramVec // seconds queued before starting

	mu    sync.Mutex
	kinds map[[2]string]*kindMetrics // kind, backend → its series
}

// kindMetrics are one kind's (and backend's) series, looked up once:
// a job touches six, and looking each up by its label values (hashing
// them, a map under a lock) was 10 µs of every eval's processor time.
type kindMetrics struct {
	queued, running prometheus.Gauge
	wait, duration  prometheus.Observer
	mu              sync.Mutex
	jobs            map[string]prometheus.Counter // by final state
}

// of is kind's series on backend.
func (m *metrics) of(kind, backend string) *kindMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.kinds[[2]string{kind, backend}]
	if k == nil {
		k = &kindMetrics{queued: m.queued.WithLabelValues(kind), running: m.running.WithLabelValues(kind),
			wait: m.wait.WithLabelValues(kind), duration: m.duration.WithLabelValues(kind, backend),
			jobs: map[string]prometheus.Counter{}}
		if m.kinds == nil {
			m.kinds = map[[2]string]*kindMetrics{}
		}
		m.kinds[[2]string{kind, backend}] = k
	}
	return k
}

// finished counts a job of k's kind that ended in state.
func (m *metrics) finished(k *kindMetrics, kind, state, backend string) {
	k.mu.Lock()
	c := k.jobs[state]
	if c == nil {
		c = m.jobs.WithLabelValues(kind, state, backend)
		k.jobs[state] = c
	}
	k.mu.Unlock()
	c.Inc()
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "glovebox_executor_runs_total", Help: "Runs and evals that reached a final state, by kind, status and backend.",
	}, []string{"kind", "status", "backend"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "glovebox_executor_refused_total", Help: "Requests refused before any work, by error code.",
	}, []string{"code"})
	m.queued = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "glovebox_executor_queue_depth", Help: "Jobs recorded and waiting for a slot.",
	}, []string{"kind"})
	m.running = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "glovebox_executor_running", Help: "Jobs executing now.",
	}, []string{"kind"})
	// Buckets from 10 ms (a trivial bwrap run is ~20 ms here) to 10 min
	// (a long run's timeout).
	b := prometheus.ExponentialBucketsRange(0.01, 600, 16)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "glovebox_executor_run_duration_seconds", Help: "Run time on the backend, sandbox set-up included.", Buckets: b,
	}, []string{"kind", "backend"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "glovebox_executor_queue_wait_seconds", Help: "Time a job waited for a slot.", Buckets: b,
	}, []string{"kind"})
	m.reg.MustRegister(m.jobs, m.refused, m.queued, m.running, m.duration, m.wait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
