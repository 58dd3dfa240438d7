module github.com/staggerhq/stagger/cmd/stagger

go 1.25

require github.com/staggerhq/stagger v0.0.0

replace github.com/staggerhq/stagger => ../..
