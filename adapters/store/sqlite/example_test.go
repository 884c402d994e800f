package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/loopchart/loopchart/adapters/store"
	"github.com/loopchart/loopchart/adapters/store/sqlite"
	"github.com/loopchart/loopchart/vocab"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "loopchart")
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, filepath.Join(dir, "loop.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	session := vocab.ID("01J9Z3NDEKTSV4RRFFQ69G5FAV")
	claim, head, err := st.Claim(ctx, session, "01J9Z3NDEKTSV4RRFFQ69G5FB3", true)
	if err != nil {
		log.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	batch := []vocab.Event{
		{Session: session, Seq: head + 1, At: at, Kind: vocab.EventStatus, Payload: vocab.StatusPayload{Status: "running"}},
		{Session: session, Seq: head + 2, At: at, Kind: vocab.EventTurnStart, Turn: 1},
	}
	if err := st.Append(ctx, session, claim, batch); err != nil {
		log.Fatal(err)
	}
	for r, err := range st.Read(ctx, session, 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s payload=%s\n", r.Seq, r.Kind, r.Payload)
	}
	for in, err := range st.Sessions(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(in.Session, in.Head, in.Status, in.Claim.Epoch)
	}
	_, _, err = st.Claim(ctx, "01J9Z3NDEKTSV4RRFFQ69G5FAW", "01J9Z3NDEKTSV4RRFFQ69G5FB3", false)
	fmt.Println(vocab.CodeOf(err) == vocab.CodeOf(store.ErrNoSession))
	// Output:
	// 1 agent/status payload={"status":"running"}
	// 2 turn/start payload=
	// 01J9Z3NDEKTSV4RRFFQ69G5FAV 2 running 1
	// true
}
