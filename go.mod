module github.com/staggerhq/stagger

go 1.25
