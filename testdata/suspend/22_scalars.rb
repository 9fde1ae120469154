[echo(nil), echo(true), echo(false), echo(1.5) + echo(2.25), echo(-7)]
