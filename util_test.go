package glovebox_test

import (
	"fmt"
	"strconv"
)

func fmtSscan(s string, a ...any) (int, error) { return fmt.Sscan(s, a...) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
