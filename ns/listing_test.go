package ns_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"ollie/ns"
)

type item struct{ id, name string }

func itemEntry(it item) ns.Entry { return ns.Entry{Name: it.name, Key: it.id, Owner: "o-" + it.id} }

// fixed lists the same items whatever the call.
func fixed(its ...item) func(context.Context, *ns.Call) ([]item, error) {
	return func(context.Context, *ns.Call) ([]item, error) { return its, nil }
}

func TestListingList(t *testing.T) {
	each := ns.Listing(fixed(item{"1", "b"}, item{"2", "a"}), itemEntry)
	got, err := each.List(context.Background(), &ns.Call{})
	if err != nil {
		t.Fatal(err)
	}
	want := []ns.Entry{{Name: "b", Key: "1", Owner: "o-1"}, {Name: "a", Key: "2", Owner: "o-2"}}
	if !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v (items' order, entry's fields)", got, want)
	}

	empty := ns.Listing(fixed(), itemEntry)
	if got, err := empty.List(context.Background(), &ns.Call{}); got != nil || err != nil {
		t.Errorf("List of nothing = %v, %v; want nil, nil", got, err)
	}
}

func TestListingLookup(t *testing.T) {
	// "x" is one item's name and another's key; "k" is a key twice, as
	// a buggy source might have it.
	each := ns.Listing(fixed(item{"x", "alpha"}, item{"k", "beta"}, item{"k", "x"}, item{"3", "gamma"}), itemEntry)
	for _, tc := range []struct {
		name string
		want ns.Entry
		ok   bool
	}{
		{"alpha", ns.Entry{Name: "alpha", Key: "x", Owner: "o-x"}, true},
		{"gamma", ns.Entry{Name: "gamma", Key: "3", Owner: "o-3"}, true},
		{"3", ns.Entry{Name: "gamma", Key: "3", Owner: "o-3"}, true},
		// A visible name wins over an alias, even one listed earlier.
		{"x", ns.Entry{Name: "x", Key: "k", Owner: "o-k"}, true},
		// Among aliases, the first in items' order.
		{"k", ns.Entry{Name: "beta", Key: "k", Owner: "o-k"}, true},
		{"delta", ns.Entry{}, false},
		{"", ns.Entry{}, false},
	} {
		got, ok := each.Lookup(context.Background(), &ns.Call{}, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Lookup(%q) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestListingPassesTheCall(t *testing.T) {
	ctx := context.WithValue(context.Background(), struct{}{}, "mark")
	call := &ns.Call{User: "glenda"}
	calls := 0
	each := ns.Listing(func(gotCtx context.Context, c *ns.Call) ([]item, error) {
		calls++
		if gotCtx != ctx || c != call {
			t.Errorf("items got ctx %v and call %p, want the handler's (%v, %p)", gotCtx, c, ctx, call)
		}
		return nil, nil
	}, itemEntry)
	each.List(ctx, call)
	each.Lookup(ctx, call, "a")
	if calls != 2 {
		t.Errorf("items ran %d times for a List and a Lookup, want 2", calls)
	}
}

func TestListingItemsError(t *testing.T) {
	boom := errors.New("session gone")
	each := ns.Listing(func(context.Context, *ns.Call) ([]item, error) { return []item{{"1", "a"}}, boom }, itemEntry)
	if got, err := each.List(context.Background(), &ns.Call{}); !errors.Is(err, boom) || got != nil {
		t.Errorf("List = %v, %v; want nil, %v", got, err, boom)
	}
	if got, ok := each.Lookup(context.Background(), &ns.Call{}, "a"); ok {
		t.Errorf("Lookup with a failing source = %v, true; want false", got)
	}
}

// TestListingServed serves a Listing directory: listed by name, walked by
// name or key, and a fid walked by key reports the current name in its
// stat, also after a rename, because Tstat looks the Key up.
func TestListingServed(t *testing.T) {
	var mu sync.Mutex
	its := []item{{"id-1", "ann"}, {"id-2", "bob"}}
	each := ns.Listing(func(context.Context, *ns.Call) ([]item, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(its), nil
	}, itemEntry)
	root := ns.Dir("", 0555, "",
		ns.Dynamic("id", 0555, "One item.", each,
			ns.ReadFile("key", 0444, "The item's key.", func(ctx context.Context, c *ns.Call) ([]byte, error) {
				return []byte(c.Key("id")), nil
			})))
	tree, err := ns.NewTree(root, "glenda", "glenda")
	if err != nil {
		t.Fatal(err)
	}
	fs := mountPeer(t, &ns.Server{Tree: tree}, ns.Peer{Kind: ns.Owner, UID: -1}, "glenda", "")

	fid, err := fs.Open("/", 0)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := fid.Dirreadall()
	fid.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range dirs {
		names = append(names, d.Name+":"+d.Uid)
	}
	if want := []string{"ann:o-id-1", "bob:o-id-2"}; !slices.Equal(names, want) {
		t.Errorf("ls / = %v, want %v", names, want)
	}
	if got := readFile(t, fs, "bob/key"); got != "id-2" {
		t.Errorf("bob/key = %q, want id-2", got)
	}
	if got := readFile(t, fs, "id-1/key"); got != "id-1" {
		t.Errorf("id-1/key = %q, want id-1", got)
	}

	held, err := fs.Open("id-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if d, err := held.Stat(); err != nil || d.Name != "ann" {
		t.Fatalf("stat of a fid walked to id-1: %v, %v; want name ann", d, err)
	}
	mu.Lock()
	its[0].name = "anna"
	mu.Unlock()
	if d, err := held.Stat(); err != nil || d.Name != "anna" {
		t.Errorf("stat of that fid after a rename: %v, %v; want name anna", d, err)
	}
	if _, err := fs.Stat("ann"); err == nil {
		t.Errorf("stat ann after the rename found it")
	}
}
