-- zlink_trio SessionRouter SPIs (spec 10 §4.1, §5.3-§5.6, §9.2), schema version 4.
--
-- The PostgreSQL backends of zlink_trio.router_pg keep the router's shared state here,
-- beside the Location Store's tables (same schema, same migration history). Conventions as
-- in 0001: text ids are their UTF-8 bytes (bytea); every mutation is ONE statement; times
-- are database seconds from router_now(); "live" always means router_now() < expires_at.
--
-- router_now() is store_now() (database time plus the store's test offset) unless the
-- test-only router_clock.frozen_at is set: then the router's database clock stands still
-- at that value and moves only when a test advances it (the PostgreSQL run of the router
-- contract suite steps it in lockstep with Trio's MockClock).
--
-- Errors a caller must see typed: ZL003 NotFound (0001), ZL101 FencingRejected.

CREATE TABLE @schema@.router_clock (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    frozen_at double precision
);
INSERT INTO @schema@.router_clock DEFAULT VALUES;

CREATE FUNCTION @schema@.router_now() RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(c.frozen_at, @schema@.store_now()) FROM @schema@.router_clock c
$$;

-- ----- SessionLeaseStore -------------------------------------------------------------------
CREATE SEQUENCE @schema@.router_fencing_seq AS bigint;

CREATE TABLE @schema@.router_leases (
    session_id bytea PRIMARY KEY,
    holder_id bytea NOT NULL,
    fencing_token bigint NOT NULL,
    expires_at double precision NOT NULL
);

-- A new lease (a fresh token) unless an unexpired one exists; that one is reported.
CREATE FUNCTION @schema@.router_try_acquire(p_session bytea, p_holder bytea, p_ttl float8)
RETURNS TABLE (granted boolean, holder_id bytea, fencing_token bigint, expires_at float8)
LANGUAGE plpgsql AS $$
DECLARE
    t double precision := @schema@.router_now();
    r @schema@.router_leases;
BEGIN
    INSERT INTO @schema@.router_leases AS l
        VALUES (p_session, p_holder, nextval('@schema@.router_fencing_seq'), t + p_ttl)
    ON CONFLICT (session_id) DO UPDATE
        SET holder_id = EXCLUDED.holder_id, fencing_token = EXCLUDED.fencing_token,
            expires_at = EXCLUDED.expires_at
        WHERE l.expires_at <= t
    RETURNING l.* INTO r;
    IF FOUND THEN
        RETURN QUERY SELECT true, r.holder_id, r.fencing_token, r.expires_at;
        RETURN;
    END IF;
    SELECT l.* INTO r FROM @schema@.router_leases l WHERE l.session_id = p_session;
    RETURN QUERY SELECT false, r.holder_id, r.fencing_token, r.expires_at;
END
$$;

-- ----- SessionRecordStore ------------------------------------------------------------------
-- transcript: one canonical JSON text per entry (ASCII: NUL is escaped), in order.
CREATE TABLE @schema@.router_records (
    session_id bytea PRIMARY KEY,
    agent_ref bytea NOT NULL,
    fence bigint NOT NULL,
    transcript text[] NOT NULL DEFAULT '{}'
);

CREATE FUNCTION @schema@.router_fence_rejected(p_session bytea, p_token bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    f bigint;
BEGIN
    SELECT fence INTO f FROM @schema@.router_records WHERE session_id = p_session;
    RAISE EXCEPTION USING ERRCODE = 'ZL101',
        MESSAGE = format('fencing token %s is older than %s', p_token, f);
END
$$;

CREATE FUNCTION @schema@.router_provision(p_session bytea, p_agent bytea, p_token bigint)
RETURNS SETOF @schema@.router_records LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.router_records;
BEGIN
    INSERT INTO @schema@.router_records AS x (session_id, agent_ref, fence)
        VALUES (p_session, p_agent, p_token)
    ON CONFLICT (session_id) DO UPDATE SET fence = EXCLUDED.fence
        WHERE x.fence <= EXCLUDED.fence
    RETURNING x.* INTO r;
    IF NOT FOUND THEN
        PERFORM @schema@.router_fence_rejected(p_session, p_token);
    END IF;
    RETURN NEXT r;
END
$$;

CREATE FUNCTION @schema@.router_append(p_session bytea, p_entries text[], p_token bigint)
RETURNS SETOF @schema@.router_records LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.router_records;
BEGIN
    UPDATE @schema@.router_records x
        SET transcript = x.transcript || p_entries, fence = p_token
        WHERE x.session_id = p_session AND x.fence <= p_token
    RETURNING x.* INTO r;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM @schema@.router_records WHERE session_id = p_session) THEN
            RAISE EXCEPTION USING ERRCODE = 'ZL003', MESSAGE = 'no session record';
        END IF;
        PERFORM @schema@.router_fence_rejected(p_session, p_token);
    END IF;
    RETURN NEXT r;
END
$$;

CREATE FUNCTION @schema@.router_delete(p_session bytea, p_token bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM @schema@.router_records WHERE session_id = p_session AND fence <= p_token;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM @schema@.router_records WHERE session_id = p_session) THEN
        PERFORM @schema@.router_fence_rejected(p_session, p_token);
    END IF;
    RETURN false;
END
$$;

-- ----- SessionInbox ------------------------------------------------------------------------
CREATE TABLE @schema@.router_inbox (
    seq bigserial PRIMARY KEY,
    session_id bytea NOT NULL,
    priority integer NOT NULL,
    delivered_at double precision NOT NULL,
    -- the database clock at delivery: the orphan scan's age (delivered_at is the delivering
    -- node's own Trio clock, not comparable across processes)
    stored_at double precision NOT NULL DEFAULT @schema@.router_now(),
    body text NOT NULL
);
CREATE INDEX router_inbox_session ON @schema@.router_inbox (session_id, priority);
CREATE INDEX router_inbox_stored ON @schema@.router_inbox (stored_at);

-- ----- SessionSignalBus: payloads over NOTIFY's limit --------------------------------------
CREATE TABLE @schema@.router_signal_spill (
    id bigserial PRIMARY KEY,
    body text NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX router_signal_spill_expiry ON @schema@.router_signal_spill (expires_at);

-- ----- IdempotencyStore --------------------------------------------------------------------
CREATE TABLE @schema@.router_idempotency (
    key bytea PRIMARY KEY,
    input_hash text NOT NULL,
    state text NOT NULL CHECK (state IN ('IN_FLIGHT', 'DONE')),
    holder_id bytea,
    created_at double precision NOT NULL,
    last_touched_at double precision NOT NULL,
    expires_at double precision,
    result text,
    session_id bytea
);
CREATE INDEX router_idempotency_stale ON @schema@.router_idempotency (last_touched_at)
    WHERE state = 'IN_FLIGHT' AND holder_id IS NOT NULL;

-- put_if_absent: reserve, or return the live entry (the caller classifies it at p_now).
CREATE FUNCTION @schema@.router_idem_put(
    p_key bytea, p_hash text, p_holder bytea, p_session bytea
) RETURNS TABLE (reserved boolean, now double precision, e @schema@.router_idempotency)
LANGUAGE plpgsql AS $$
DECLARE
    t double precision := @schema@.router_now();
    r @schema@.router_idempotency;
BEGIN
    DELETE FROM @schema@.router_idempotency x WHERE x.key = p_key AND x.expires_at <= t;
    INSERT INTO @schema@.router_idempotency AS x
        VALUES (p_key, p_hash, 'IN_FLIGHT', p_holder, t, t, NULL, NULL, p_session)
    ON CONFLICT (key) DO NOTHING
    RETURNING x.* INTO r;
    IF FOUND THEN
        RETURN QUERY SELECT true, t, r;
        RETURN;
    END IF;
    SELECT x.* INTO r FROM @schema@.router_idempotency x WHERE x.key = p_key;
    RETURN QUERY SELECT false, t, r;
END
$$;

-- mark_done / acquire_holder: the change, or why not ('EXPIRED', 'DONE', 'HELD',
-- 'NOT_HOLDER'); p_done selects which of the two.
CREATE FUNCTION @schema@.router_idem_take(
    p_key bytea, p_holder bytea, p_done boolean, p_result text, p_primary float8
) RETURNS TABLE (rejection text, e @schema@.router_idempotency)
LANGUAGE plpgsql AS $$
DECLARE
    t double precision := @schema@.router_now();
    r @schema@.router_idempotency;
BEGIN
    SELECT x.* INTO r FROM @schema@.router_idempotency x WHERE x.key = p_key FOR UPDATE;
    IF NOT FOUND OR r.expires_at <= t THEN
        RETURN QUERY SELECT 'EXPIRED'::text, NULL::@schema@.router_idempotency;
        RETURN;
    END IF;
    IF r.state = 'DONE' THEN
        RETURN QUERY SELECT 'DONE'::text, NULL::@schema@.router_idempotency;
        RETURN;
    END IF;
    IF p_done THEN
        IF r.holder_id IS DISTINCT FROM p_holder THEN
            RETURN QUERY SELECT 'NOT_HOLDER'::text, NULL::@schema@.router_idempotency;
            RETURN;
        END IF;
        UPDATE @schema@.router_idempotency x
            SET state = 'DONE', result = p_result, last_touched_at = t, expires_at = t + p_primary
            WHERE x.key = p_key RETURNING x.* INTO r;
    ELSE
        IF r.holder_id IS NOT NULL THEN
            RETURN QUERY SELECT 'HELD'::text, NULL::@schema@.router_idempotency;
            RETURN;
        END IF;
        UPDATE @schema@.router_idempotency x
            SET holder_id = p_holder, last_touched_at = t, expires_at = NULL
            WHERE x.key = p_key RETURNING x.* INTO r;
    END IF;
    RETURN QUERY SELECT NULL::text, r;
END
$$;
