package executor

import (
	"context"
	"strconv"
	"time"

	"github.com/gloveboxhq/glovebox/internal/benchhook"
)

func init() { benchhook.StoreWrites = storeWrites }

// benchRecord is a `1+1` eval's final record as the executor stores it.
var benchRecord = []byte(`{"key":"e-0123456789abcdef0123456789abcdef","state":"completed","backend":"wasm","started":true,` +
	`"created":"2026-12-02T09:00:00.000000001Z","finished":"2026-12-02T09:00:00.000400001Z",` +
	`"eval":{"status":"ok","value":"2","stdout":"","stderr":"","fuel_used":0,"duration_ms":0.04}}`)

// storeWrites is benchhook.StoreWrites: the store's share of one eval,
// as BenchmarkStoreEval measures it, for glovebox bench's row beside the
// executor's.
func storeWrites(ctx context.Context, path, url string) (func(int) error, func() error, error) {
	var st store
	var err error
	if url != "" {
		st, err = openPgStore(ctx, url)
	} else {
		st, err = openStore(path)
	}
	if err != nil {
		return nil, nil, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	write := func(i int) error {
		key := "e-" + run + "-" + strconv.Itoa(i)
		if _, _, err := st.begin(ctx, &entry{Tenant: "bench", Key: key, Kind: "eval", Hash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			State: "running", Started: true, Created: time.Now()}); err != nil {
			return err
		}
		return st.finish(ctx, "bench", key, "completed", true, benchRecord)
	}
	return write, st.close, nil
}
