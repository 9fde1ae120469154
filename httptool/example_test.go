package httptool_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/httptool"
)

// A tool for two public APIs and one internal service the operator trusts
// by its network. Pass the toolset to glovebox.New as Config.Tools; the
// guest then calls http_get("https://api.example.com/status").
func Example() {
	tool, err := httptool.New(httptool.Config{
		AllowHosts:      []string{"api.example.com", "*.githubusercontent.com", "billing.internal.example"},
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		MaxRequests:     20,
	})
	if err != nil {
		panic(err)
	}
	var ts glovebox.Toolset
	err = tool.Register(&ts)
	if err != nil {
		panic(err)
	}
	fmt.Println(ts.Names())

	// A wildcard must be a whole first label.
	_, err = httptool.New(httptool.Config{AllowHosts: []string{"api.*.com"}})
	fmt.Println(errors.Is(err, httptool.ErrInvalidConfig))
	// Output:
	// [http_delete http_get http_head http_patch http_post http_put http_request]
	// true
}
