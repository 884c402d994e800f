package loopguard

// AsIs and HashGeneral expose asIs and hashGeneral (HashArgs without the
// shortcut) to the external tests.
var (
	AsIs        = asIs
	HashGeneral = hashGeneral
)
