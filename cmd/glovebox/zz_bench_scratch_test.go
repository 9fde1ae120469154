package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

func TestZZBenchCalls(t *testing.T) {
	ctx := context.Background()
	cacheDir, _ := glovebox.DefaultCacheDir()
	eng, err := openEngine(ctx, cacheDir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	yes := func(ok bool) string { if ok { return "yes" }; return "NO" }
	row := func(met string, cols ...string) { fmt.Println(met, cols) }
	if err := benchCalls(ctx, row, yes, eng, cacheDir); err != nil {
		t.Fatal(err)
	}
}
