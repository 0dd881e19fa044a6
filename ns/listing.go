package ns

import "context"

// Listing builds the Each of a dynamic directory from the live items it
// shows: items returns them, in the order to list them, and entry makes
// an item's Entry.
//
// Lookup finds the item whose entry has the walked name as its Name, else
// one that has it as its Key, the first in items' order either way: a
// visible name is never hidden by another item's alias, and each Key
// resolves, as Tstat needs. An error from items fails List and makes
// Lookup report false, as for a name nobody has.
//
// Lookup scans what items returns, so it suits the directories of live
// state that people and agents list (sessions, agents, processes, parked
// requests), not ones of thousands of entries.
func Listing[T any](items func(ctx context.Context, c *Call) ([]T, error), entry func(T) Entry) *Each {
	return &Each{
		List: func(ctx context.Context, c *Call) ([]Entry, error) {
			its, err := items(ctx, c)
			if err != nil {
				return nil, err
			}
			var ents []Entry
			for _, it := range its {
				ents = append(ents, entry(it))
			}
			return ents, nil
		},
		Lookup: func(ctx context.Context, c *Call, name string) (Entry, bool) {
			its, err := items(ctx, c)
			if err != nil {
				return Entry{}, false
			}
			var byKey Entry
			found := false
			for _, it := range its {
				e := entry(it)
				if e.Name == name {
					return e, true
				}
				if !found && e.Key == name {
					byKey, found = e, true
				}
			}
			return byKey, found
		},
	}
}
