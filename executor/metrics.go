package executor

import (
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
