package executor

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Tenant is one caller of the executor: a name, the SHA-256 of its bearer
// token and its limits. A tenant sees only its own runs: idempotency keys
// are per tenant. Zero limits take the defaults named beside them.
type Tenant struct {
	Name string `yaml:"name" json:"name"`
	// TokenSHA256 is the hex SHA-256 of the tenant's token (see
	// [MintToken]); the token itself is never stored.
	TokenSHA256 string `yaml:"token_sha256" json:"token_sha256"`
	// MaxConcurrentRuns is how many of its runs execute at once;
	// DefaultMaxConcurrentRuns.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs" json:"max_concurrent_runs"`
	// MaxQueuedRuns is how many more wait for a slot before requests
	// are refused with queue_full; DefaultMaxQueuedRuns. Negative: none.
	MaxQueuedRuns int `yaml:"max_queued_runs" json:"max_queued_runs"`
	// MaxRequestBytes caps a request body; DefaultMaxRequestBytes.
	MaxRequestBytes int64 `yaml:"max_request_bytes" json:"max_request_bytes"`
	// MaxStoredBytes bounds the bytes of records the store keeps for
	// the tenant (each job's final record, kept for the retention). A
	// request finding less than 64 KiB left (after the room its running
	// jobs reserved) is refused quota_exceeded before it is recorded;
	// each job reserves room for its largest possible record (or what
	// is left) as it starts, a queued one finding under 64 KiB then ends
	// failed (quota_exceeded) without running, and a record larger than
	// its reservation is cut to fit (Record.QuotaTruncated).
	// DefaultMaxStoredBytes; negative: no bound.
	MaxStoredBytes int64 `yaml:"max_stored_bytes" json:"max_stored_bytes"`
}

// Tenant limit defaults: our choices for a 2-core executor running
// scripts a model wrote (each run gets up to box.DefaultMemory).
const (
	DefaultMaxConcurrentRuns = 4
	DefaultMaxQueuedRuns     = 16
	DefaultMaxRequestBytes   = 8 << 20
	// DefaultMaxStoredBytes is 256 MiB: about fourteen of the largest
	// run records (two 4 MiB outputs and 4 MiB of files, in base64) a
	// day, or thousands of ordinary ones.
	DefaultMaxStoredBytes = 256 << 20
)

// MintToken returns a new bearer token ("gbx_" and 43 base64url
// characters: 256 random bits) and its hex SHA-256 for the tenants file.
func MintToken() (token, sha string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "gbx_" + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken is the hex SHA-256 of token, the form a tenants file holds. A
// single unsalted hash is enough because tokens carry 256 random bits:
// there is no dictionary to try.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// tenant is a configured Tenant with its counters.
type tenant struct {
	Tenant
	hash [32]byte
	*limiter
}

// limiter holds a tenant's slots and queue count. A reload that keeps a
// tenant's limits keeps its limiter, so runs in flight still count.
type limiter struct {
	slot chan struct{} // MaxConcurrentRuns slots
	next chan struct{} // nextPlaces×MaxConcurrentRuns places to wait for one recorded running (job.go)
	max  int           // MaxConcurrentRuns + MaxQueuedRuns

	mu      sync.Mutex
	pending int // queued + running jobs, guarded by mu
}

// newTenants checks and completes ts; a tenant of old with the same name
// and limits keeps its limiter.
func newTenants(ts []Tenant, old []*tenant) ([]*tenant, error) {
	var out []*tenant
	seen := map[string]bool{}
	for _, t := range ts {
		if t.Name == "" || seen[t.Name] {
			return nil, fmt.Errorf("executor: tenant name %q is empty or repeated", t.Name)
		}
		seen[t.Name] = true
		h, err := hex.DecodeString(t.TokenSHA256)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("executor: tenant %s: token_sha256 must be 64 hex digits", t.Name)
		}
		if t.MaxConcurrentRuns < 0 || t.MaxRequestBytes < 0 {
			return nil, fmt.Errorf("executor: tenant %s: negative limit", t.Name)
		}
		if t.MaxConcurrentRuns == 0 {
			t.MaxConcurrentRuns = DefaultMaxConcurrentRuns
		}
		if t.MaxQueuedRuns == 0 {
			t.MaxQueuedRuns = DefaultMaxQueuedRuns
		} else if t.MaxQueuedRuns < 0 {
			t.MaxQueuedRuns = 0
		}
		if t.MaxRequestBytes == 0 {
			t.MaxRequestBytes = DefaultMaxRequestBytes
		}
		if t.MaxStoredBytes == 0 {
			t.MaxStoredBytes = DefaultMaxStoredBytes
		}
		nt := &tenant{Tenant: t}
		copy(nt.hash[:], h)
		for _, o := range old {
			if o.Name == t.Name && o.MaxConcurrentRuns == t.MaxConcurrentRuns && o.MaxQueuedRuns == t.MaxQueuedRuns {
				nt.limiter = o.limiter
			}
		}
		if nt.limiter == nil {
			nt.limiter = &limiter{slot: make(chan struct{}, t.MaxConcurrentRuns), next: make(chan struct{}, nextPlaces*t.MaxConcurrentRuns), max: t.MaxConcurrentRuns + t.MaxQueuedRuns}
		}
		out = append(out, nt)
	}
	return out, nil
}

// reserve takes a queue place for one job; false when the tenant's running
// and queued jobs are at their limits.
func (t *limiter) reserve() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending >= t.max {
		return false
	}
	t.pending++
	return true
}

func (t *limiter) release() {
	t.mu.Lock()
	t.pending--
	t.mu.Unlock()
}

// authenticate finds the tenant holding the request's bearer token. Every
// tenant's hash is compared, in constant time, whichever matches.
func authenticate(ts []*tenant, r *http.Request) *tenant {
	// The scheme name is case-insensitive (RFC 9110 section 11.1).
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(tok))
	var found *tenant
	for _, t := range ts {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found = t
		}
	}
	return found
}
