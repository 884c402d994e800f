package agentsvc_test

import "github.com/loopchart/loopchart/hooks"

type hookNext[C any] = hooks.Next[C]
