package hooks

import (
	"testing"

	"github.com/acme/widget" // test files of hooks may use third-party packages
)

func TestInternal(t *testing.T) { _ = widget.Name }
