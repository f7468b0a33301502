package health_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

func TestCheckSchema(t *testing.T) {
	tests := []struct {
		name, stored string // "" = no key
		wantPrev     int
		wantStored   string
		wantErr      string
		newer        bool
	}{
		{name: "fresh redis", wantStored: "1"},
		{name: "same version", stored: "1", wantPrev: 1, wantStored: "1"},
		{name: "older version is upgraded", stored: "0", wantPrev: 0, wantStored: "1"},
		{name: "newer version is refused", stored: "7", wantStored: "7", newer: true, wantErr: "upgrade vigil"},
		{name: "not a number", stored: "x", wantStored: "x", wantErr: "not a key layout version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, env := newStore(t)
			ctx := testCtx(t)
			k := s.Keys().Schema()
			if tt.stored != "" {
				if err := env.Client.Set(ctx, k, tt.stored, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			prev, err := s.CheckSchema(ctx)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CheckSchema: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("CheckSchema: %v, want an error saying %q", err, tt.wantErr)
			case errors.Is(err, health.ErrSchemaNewer) != tt.newer:
				t.Fatalf("errors.Is(ErrSchemaNewer) = %v, want %v", !tt.newer, tt.newer)
			case err == nil && prev != tt.wantPrev:
				t.Fatalf("previous %d, want %d", prev, tt.wantPrev)
			}
			if got, _ := env.Client.Get(ctx, k).Result(); got != tt.wantStored {
				t.Fatalf("stored %q, want %q", got, tt.wantStored)
			}
		})
	}
}
