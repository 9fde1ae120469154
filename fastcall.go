package glovebox

import "context"

// scalarCall calls a tool whose Go signature is one of a few common
// all-scalar shapes directly, without reflect.Call (which, with its
// argument slice and boxed values, was about half of the Go side of a
// round trip). It takes only positional arguments, exactly as many as the
// function has, each already of the guest type the parameter takes
// unconverted (Integer for int, Float or Integer for float64, String,
// true/false); handled is false otherwise, and the caller then takes the
// reflect path, which gives every error message. So both paths give the
// same results and errors.
type scalarCall func(ctx context.Context, pos []any) (res any, err error, handled bool)

// The argument conversions of the fast path: the same values convertArg
// gives, or false where convertArg would convert otherwise or fail.
func argInt(x any) (int, bool) {
	n, ok := x.(int64)
	if !ok || int64(int(n)) != n {
		return 0, false
	}
	return int(n), true
}

func argString(x any) (string, bool) { s, ok := x.(string); return s, ok }

func argBool(x any) (bool, bool) { b, ok := x.(bool); return b, ok }

func argFloat(x any) (float64, bool) {
	switch n := x.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	}
	return 0, false
}

// scalarFast returns the fast path for f, or nil when f's type is not one
// of the shapes below. Named types (type ID string) never match and take
// the reflect path.
func scalarFast(f any) scalarCall {
	switch f := f.(type) {
	case func() int:
		return fixed0(func(context.Context) (int, error) { return f(), nil })
	case func() string:
		return fixed0(func(context.Context) (string, error) { return f(), nil })
	case func() (string, error):
		return fixed0(func(context.Context) (string, error) { return f() })
	case func(int) int:
		return fixed1(argInt, func(_ context.Context, a int) (int, error) { return f(a), nil })
	case func(int, int) int:
		return fixed2(argInt, argInt, func(_ context.Context, a, b int) (int, error) { return f(a, b), nil })
	case func(int, int) (int, error):
		return fixed2(argInt, argInt, func(_ context.Context, a, b int) (int, error) { return f(a, b) })
	case func(float64, float64) float64:
		return fixed2(argFloat, argFloat, func(_ context.Context, a, b float64) (float64, error) { return f(a, b), nil })
	case func(string) string:
		return fixed1(argString, func(_ context.Context, a string) (string, error) { return f(a), nil })
	case func(string) bool:
		return fixed1(argString, func(_ context.Context, a string) (bool, error) { return f(a), nil })
	case func(string) (string, error):
		return fixed1(argString, func(_ context.Context, a string) (string, error) { return f(a) })
	case func(bool) bool:
		return fixed1(argBool, func(_ context.Context, a bool) (bool, error) { return f(a), nil })
	case func(context.Context, string) (string, error):
		return fixed1(argString, f)
	case func(context.Context, int) (int, error):
		return fixed1(argInt, f)
	}
	return nil
}

// fixed0, fixed1 and fixed2 make the fast path of a call with that many
// positional arguments, each converted by its conv.
func fixed0[R any](call func(context.Context) (R, error)) scalarCall {
	return func(ctx context.Context, pos []any) (any, error, bool) {
		if len(pos) != 0 {
			return nil, nil, false
		}
		return result(call(ctx))
	}
}

func fixed1[A, R any](conv func(any) (A, bool), call func(context.Context, A) (R, error)) scalarCall {
	return func(ctx context.Context, pos []any) (any, error, bool) {
		if len(pos) != 1 {
			return nil, nil, false
		}
		a, ok := conv(pos[0])
		if !ok {
			return nil, nil, false
		}
		return result(call(ctx, a))
	}
}

func fixed2[A, B, R any](convA func(any) (A, bool), convB func(any) (B, bool), call func(context.Context, A, B) (R, error)) scalarCall {
	return func(ctx context.Context, pos []any) (any, error, bool) {
		if len(pos) != 2 {
			return nil, nil, false
		}
		a, ok1 := convA(pos[0])
		b, ok2 := convB(pos[1])
		if !ok1 || !ok2 {
			return nil, nil, false
		}
		return result(call(ctx, a, b))
	}
}

// result is a (value, error) pair as the reflect path returns it: no value
// with an error.
func result[T any](v T, err error) (any, error, bool) {
	if err != nil {
		return nil, err, true
	}
	return v, nil, true
}
