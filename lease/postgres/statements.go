package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// statements are the SQL texts for one table. Every statement returns one
// row (won, holder, token, live, remaining_us, expiry_us), or none for a
// name never acquired.
type statements struct {
	schema, acquire, renew, release, get string
}

// The columns every statement returns, for a row aliased l, computed on the
// server's clock.
const returning = `l.holder, l.token,
	(l.holder <> '' AND l.expiry > clock_timestamp()),
	(extract(epoch FROM l.expiry - clock_timestamp()) * 1000000)::bigint,
	(extract(epoch FROM l.expiry) * 1000000)::bigint`

func newStatements(table string) statements {
	t := pgx.Identifier{table}.Sanitize()
	fn := pgx.Identifier{table + "_notify"}.Sanitize()
	r := strings.NewReplacer("$T", t, "$F", fn, "$N", table+"_notify", "$C", "'"+table+"'", "$R", returning)
	return statements{
		schema: r.Replace(`
CREATE TABLE IF NOT EXISTS $T (
	name   text PRIMARY KEY,
	holder text NOT NULL DEFAULT '',
	token  bigint NOT NULL,
	expiry timestamptz,
	live   boolean NOT NULL DEFAULT false
);
CREATE OR REPLACE FUNCTION $F() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
	PERFORM pg_notify($C, NEW.name);
	RETURN NULL;
END $body$;
DO $do$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '$N' AND tgrelid = '$T'::regclass) THEN
		CREATE TRIGGER $N AFTER INSERT OR UPDATE ON $T FOR EACH ROW EXECUTE FUNCTION $F();
	END IF;
END $do$;`),

		// $1 name, $2 holder, $3 ttl µs, $4 live (advisory), $5 whether the
		// caller took the name's advisory lock, proving the holder's
		// session gone. The CTE returns the new row if the upsert won, else
		// the current row as the statement found it.
		acquire: r.Replace(`
WITH won AS (
	INSERT INTO $T AS l (name, holder, token, expiry, live)
	VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 microsecond', $4)
	ON CONFLICT (name) DO UPDATE
		SET holder = excluded.holder, token = l.token + 1, expiry = excluded.expiry, live = excluded.live
		WHERE l.holder = '' OR l.expiry <= clock_timestamp() OR (l.live AND $5::boolean)
	RETURNING $R
)
SELECT true, * FROM won
UNION ALL
SELECT false, $R FROM $T l WHERE l.name = $1 AND NOT EXISTS (SELECT 1 FROM won)`),

		// $1 name, $2 holder, $3 token, $4 ttl µs.
		renew: r.Replace(`
WITH won AS (
	UPDATE $T l SET expiry = clock_timestamp() + $4 * interval '1 microsecond'
	WHERE l.name = $1 AND l.holder = $2 AND l.token = $3 AND l.expiry > clock_timestamp()
	RETURNING $R
)
SELECT true, * FROM won
UNION ALL
SELECT false, $R FROM $T l WHERE l.name = $1 AND NOT EXISTS (SELECT 1 FROM won)`),

		// $1 name, $2 holder, $3 token.
		release: r.Replace(`
WITH won AS (
	UPDATE $T l SET holder = '', expiry = NULL, live = false
	WHERE l.name = $1 AND l.holder = $2 AND l.token = $3 AND l.expiry > clock_timestamp()
	RETURNING $R
)
SELECT true, * FROM won
UNION ALL
SELECT false, $R FROM $T l WHERE l.name = $1 AND NOT EXISTS (SELECT 1 FROM won)`),

		get: r.Replace(`SELECT false, $R FROM $T l WHERE l.name = $1`),
	}
}
