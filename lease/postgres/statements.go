package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statements are the SQL texts for one table. Every statement returns one
// row (won, holder, token, held, remaining_us, expiry_us, live), or none
// for a name never acquired: held is true while the lease is unexpired and
// held, live while the row records an advisory lock for its holder.
type statements struct {
	schema, acquire, renew, release, get string
}

// The columns every statement returns, for a row aliased l, computed on the
// server's clock.
const returning = `l.holder, l.token,
	(l.holder <> '' AND l.expiry > clock_timestamp()),
	(extract(epoch FROM l.expiry - clock_timestamp()) * 1000000)::bigint,
	(extract(epoch FROM l.expiry) * 1000000)::bigint,
	l.live`

// returningGet is returning for Get, which also reports a holder whose
// advisory lock is free (its session ended) as not holding: taking the lock
// shared, for the statement only, succeeds only if no session holds it.
// The CASE orders the tests so that the lock is tried only for a row held
// by an advisory holder; on any other row, a lock taken even for a moment
// could make a concurrent acquirer's pg_try_advisory_lock fail.
const returningGet = `l.holder, l.token,
	CASE WHEN l.holder = '' OR l.expiry <= clock_timestamp() THEN false
		WHEN l.live THEN NOT pg_try_advisory_xact_lock_shared($K, hashtext(l.name))
		ELSE true END,
	(extract(epoch FROM l.expiry - clock_timestamp()) * 1000000)::bigint,
	(extract(epoch FROM l.expiry) * 1000000)::bigint,
	l.live`

func newStatements(table string) statements {
	t := pgx.Identifier{table}.Sanitize()
	fn := pgx.Identifier{table + "_notify"}.Sanitize()
	k := strconv.Itoa(advisoryClass)
	r := strings.NewReplacer("$T", t, "$F", fn, "$N", table+"_notify", "$C", "'"+table+"'",
		"$RG", strings.ReplaceAll(returningGet, "$K", k), "$R", returning, "$K", k)
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
		// session gone, $6 whether the caller's session held that lock
		// already (then it proves nothing: the live holder is the caller's
		// own session). A caller that has not tried the lock tries it here,
		// for the statement only. The CTE returns the new row if the upsert
		// won, else the current row as the statement found it.
		acquire: r.Replace(`
WITH won AS (
	INSERT INTO $T AS l (name, holder, token, expiry, live)
	VALUES ($1, $2, 1, clock_timestamp() + $3 * interval '1 microsecond', $4)
	ON CONFLICT (name) DO UPDATE
		SET holder = excluded.holder, token = l.token + 1, expiry = excluded.expiry, live = excluded.live
		WHERE CASE WHEN l.holder = '' OR l.expiry <= clock_timestamp() THEN true
			WHEN l.live AND NOT $6::boolean THEN $5::boolean OR pg_try_advisory_xact_lock($K, hashtext(l.name))
			ELSE false END
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

		get: r.Replace(`SELECT false, $RG FROM $T l WHERE l.name = $1`),
	}
}
