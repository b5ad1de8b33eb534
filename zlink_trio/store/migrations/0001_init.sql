-- zlink_trio Location Store, schema version 1.
--
-- Applied by zlink_trio.store.postgres (at store startup, or `zlink-trio store migrate`)
-- inside one transaction holding pg_advisory_xact_lock for the schema. "@schema@" is
-- replaced by the quoted schema name. Never edit a released migration: add a new file.
--
-- Conventions:
-- * text ids (object ids, stable types, mesh names) are stored as their UTF-8 bytes
--   (bytea): byte order is Unicode code point order, and NUL is allowed;
-- * times are store time in seconds (float8): extract(epoch FROM now()) plus the test
--   clock offset (store_clock); "live" always means store_now() < expires_at;
-- * every mutation is ONE statement, so it is its own transaction: it commits as a whole
--   or not at all. Multi-row mutations are the functions below; single-row field updates
--   are plain UPDATEs issued by the store (zlink_trio/store/_pgsql.py), followed by
--   lost() on the same connection when the CAS matched nothing;
-- * errors a caller must see typed are raised with SQLSTATEs of class ZL:
--   ZL001 OwnerLeaseExpired, ZL002 CapacityExceeded, ZL003 NotFound,
--   ZL004 InvalidOperation, ZL005 DescriptorConflict;
-- * lock order (no deadlocks): nodes, then node_usage (by node_rid), then authority.

CREATE SEQUENCE @schema@.store_version_seq AS bigint;
CREATE SEQUENCE @schema@.object_generation_seq AS bigint;
CREATE SEQUENCE @schema@.lease_generation_seq AS bigint;

CREATE TABLE @schema@.store_clock (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    offset_seconds double precision NOT NULL DEFAULT 0
);
INSERT INTO @schema@.store_clock DEFAULT VALUES;

CREATE FUNCTION @schema@.store_now() RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT extract(epoch FROM now())::double precision + offset_seconds
    FROM @schema@.store_clock
$$;

-- ----- nodes, descriptors, capacity ------------------------------------------------------
CREATE TABLE @schema@.nodes (
    node_rid bytea PRIMARY KEY,
    node_generation bigint NOT NULL,
    lease_generation bigint NOT NULL,
    lease_expires_at double precision NOT NULL,
    capacity bigint NOT NULL
);

CREATE TABLE @schema@.descriptors (
    mesh_name bytea NOT NULL,
    node_rid bytea NOT NULL REFERENCES @schema@.nodes ON DELETE CASCADE,
    node_generation bigint NOT NULL,
    host text NOT NULL,
    port integer NOT NULL,
    object_role text NOT NULL,
    actor_types bytea[] NOT NULL,
    spot_types bytea[] NOT NULL,
    instance_types bytea[] NOT NULL,
    placement_weight double precision NOT NULL,
    entry_spot_id bytea NOT NULL,
    PRIMARY KEY (mesh_name, node_rid)
);
CREATE INDEX descriptors_node_rid ON @schema@.descriptors (node_rid);
CREATE INDEX descriptors_entry_spot_id ON @schema@.descriptors (entry_spot_id);

-- Capacity counters per NodeRid; they outlive registrations (api.NodeRecord).
CREATE TABLE @schema@.node_usage (
    node_rid bytea PRIMARY KEY,
    active bigint NOT NULL DEFAULT 0,
    pending bigint NOT NULL DEFAULT 0
);

CREATE TYPE @schema@.descriptor_in AS (
    mesh_name bytea,
    host text,
    port integer,
    object_role text,
    actor_types bytea[],
    spot_types bytea[],
    instance_types bytea[],
    placement_weight double precision,
    entry_spot_id bytea
);

-- ----- authority rows ---------------------------------------------------------------------
CREATE TABLE @schema@.authority (
    namespace text NOT NULL CHECK (namespace IN ('actor', 'spot')),
    object_id bytea NOT NULL,
    kind text NOT NULL CHECK (kind IN ('actor', 'entry_spot', 'user_spot', 'instance_spot')),
    stable_type bytea NOT NULL,
    state text NOT NULL CHECK (state IN ('creating', 'ready', 'closing')),
    store_version bigint NOT NULL,
    object_generation bigint NOT NULL,
    owner_generation bigint NOT NULL,
    owner_mesh bytea NOT NULL,
    owner_rid bytea NOT NULL,
    owner_node_generation bigint NOT NULL,
    owner_lease_generation bigint NOT NULL,
    membership bytea,
    pending_sha256 bytea,
    pending_size bigint,
    op_source_rid bytea,
    op_source_generation bigint,
    op_id bytea,
    recovery_sha256 bytea,
    recovery_size bigint,
    recovery_cursor bigint,
    relocation_id bytea,
    relocation_mesh bytea,
    relocation_rid bytea,
    relocation_node_generation bigint,
    relocation_lease_generation bigint,
    relocation_sealed boolean,
    PRIMARY KEY (namespace, object_id)
) WITH (fillfactor = 80);
CREATE INDEX authority_owner_rid ON @schema@.authority (owner_rid);

-- What every CAS function returns: status 0 = applied (the row after the mutation, all
-- NULL when it was deleted), 1 = conflict (the current row, all NULL when Missing).
CREATE TYPE @schema@.outcome AS (
    status smallint,
    namespace text,
    object_id bytea,
    kind text,
    stable_type bytea,
    state text,
    store_version bigint,
    object_generation bigint,
    owner_generation bigint,
    owner_mesh bytea,
    owner_rid bytea,
    owner_node_generation bigint,
    owner_lease_generation bigint,
    membership bytea,
    pending_sha256 bytea,
    pending_size bigint,
    op_source_rid bytea,
    op_source_generation bigint,
    op_id bytea,
    recovery_sha256 bytea,
    recovery_size bigint,
    recovery_cursor bigint,
    relocation_id bytea,
    relocation_mesh bytea,
    relocation_rid bytea,
    relocation_node_generation bigint,
    relocation_lease_generation bigint,
    relocation_sealed boolean
);

-- ----- terminals and roots ------------------------------------------------------------------
CREATE TABLE @schema@.terminals (
    source_rid bytea NOT NULL,
    source_generation bigint NOT NULL,
    operation_id bytea NOT NULL,
    result bytea NOT NULL,
    expires_at double precision NOT NULL,
    PRIMARY KEY (source_rid, source_generation, operation_id)
);
CREATE INDEX terminals_expires_at ON @schema@.terminals (expires_at);

CREATE TABLE @schema@.roots (
    sha256 bytea PRIMARY KEY,
    size bigint NOT NULL,
    data bytea NOT NULL,
    expires_at double precision NOT NULL  -- 'Infinity' = kept until delete_root
);
CREATE INDEX roots_expires_at ON @schema@.roots (expires_at);

-- ----- functions ----------------------------------------------------------------------------

-- The CAS lost: the current row (a new snapshot: READ COMMITTED). Entry claims refuse.
CREATE FUNCTION @schema@.lost(p_ns text, p_id bytea) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF FOUND AND r.kind = 'entry_spot' THEN
        RAISE EXCEPTION 'Entry Spot claims change only through node registration'
            USING ERRCODE = 'ZL004';
    END IF;
    RETURN QUERY SELECT 1::smallint, r.*;
END
$$;

-- The owner fence is current: same lifecycle and lease generation, lease unexpired.
CREATE FUNCTION @schema@.require_lease(
    p_now double precision, p_rid bytea, p_node_generation bigint, p_lease_generation bigint
) RETURNS @schema@.nodes
LANGUAGE plpgsql AS $$
DECLARE
    n @schema@.nodes;
BEGIN
    SELECT * INTO n FROM @schema@.nodes WHERE node_rid = p_rid FOR SHARE;
    IF NOT FOUND OR n.node_generation <> p_node_generation
            OR n.lease_generation <> p_lease_generation OR NOT p_now < n.lease_expires_at THEN
        RAISE EXCEPTION 'owner lease of node % is not current', encode(p_rid, 'hex')
            USING ERRCODE = 'ZL001';
    END IF;
    RETURN n;
END
$$;

-- Lock a node's capacity counters (creating them at zero).
CREATE FUNCTION @schema@.lock_usage(p_rid bytea) RETURNS @schema@.node_usage
LANGUAGE plpgsql AS $$
DECLARE
    u @schema@.node_usage;
BEGIN
    SELECT * INTO u FROM @schema@.node_usage WHERE node_rid = p_rid FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO @schema@.node_usage (node_rid) VALUES (p_rid) ON CONFLICT DO NOTHING;
        SELECT * INTO u FROM @schema@.node_usage WHERE node_rid = p_rid FOR UPDATE;
    END IF;
    RETURN u;
END
$$;

-- First writer wins while the record is live; returns the stored result.
CREATE FUNCTION @schema@.put_terminal(
    p_now double precision, p_rid bytea, p_generation bigint, p_operation bytea,
    p_result bytea, p_retain double precision
) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    v bytea;
BEGIN
    INSERT INTO @schema@.terminals AS t
        VALUES (p_rid, p_generation, p_operation, p_result, p_now + p_retain)
    ON CONFLICT (source_rid, source_generation, operation_id) DO UPDATE
        SET result = excluded.result, expires_at = excluded.expires_at
        WHERE NOT p_now < t.expires_at
    RETURNING result INTO v;
    IF NOT FOUND THEN
        SELECT result INTO v FROM @schema@.terminals
        WHERE source_rid = p_rid AND source_generation = p_generation
            AND operation_id = p_operation;
    END IF;
    RETURN v;
END
$$;

CREATE FUNCTION @schema@.reserve(
    p_ns text, p_id bytea, p_kind text, p_stable_type bytea,
    p_owner_mesh bytea, p_owner_rid bytea, p_owner_node_generation bigint,
    p_owner_lease_generation bigint, p_membership bytea,
    p_pending_sha256 bytea, p_pending_size bigint,
    p_op_source_rid bytea, p_op_source_generation bigint, p_op_id bytea,
    p_recovery_sha256 bytea, p_recovery_size bigint, p_recovery_cursor bigint
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    n @schema@.nodes;
    d @schema@.descriptors;
    u @schema@.node_usage;
    r @schema@.authority;
    types bytea[];
BEGIN
    -- order: owner lease, existing row, type, capacity
    n := @schema@.require_lease(@schema@.store_now(), p_owner_rid, p_owner_node_generation,
                                p_owner_lease_generation);
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF FOUND THEN
        RETURN QUERY SELECT 1::smallint, r.*;
        RETURN;
    END IF;
    SELECT * INTO d FROM @schema@.descriptors
    WHERE mesh_name = p_owner_mesh AND node_rid = p_owner_rid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'node % publishes no descriptor in that mesh', encode(p_owner_rid, 'hex')
            USING ERRCODE = 'ZL003';
    END IF;
    types := CASE p_kind WHEN 'actor' THEN d.actor_types
                         WHEN 'user_spot' THEN d.spot_types
                         WHEN 'instance_spot' THEN d.instance_types END;
    IF types IS NULL OR NOT p_stable_type = ANY (types) THEN
        RAISE EXCEPTION 'node % does not register that % type', encode(p_owner_rid, 'hex'), p_kind
            USING ERRCODE = 'ZL003';
    END IF;
    u := @schema@.lock_usage(p_owner_rid);
    IF u.active + u.pending >= n.capacity THEN
        RAISE EXCEPTION 'node % is at capacity %', encode(p_owner_rid, 'hex'), n.capacity
            USING ERRCODE = 'ZL002';
    END IF;
    INSERT INTO @schema@.authority VALUES (
        p_ns, p_id, p_kind, p_stable_type, 'creating',
        nextval('@schema@.store_version_seq'), nextval('@schema@.object_generation_seq'), 1,
        p_owner_mesh, p_owner_rid, p_owner_node_generation, p_owner_lease_generation,
        p_membership, p_pending_sha256, p_pending_size,
        p_op_source_rid, p_op_source_generation, p_op_id,
        p_recovery_sha256, p_recovery_size, p_recovery_cursor,
        NULL, NULL, NULL, NULL, NULL, NULL)
    ON CONFLICT DO NOTHING
    RETURNING * INTO r;
    IF NOT FOUND THEN  -- a concurrent reservation committed first: it won
        SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
        RETURN QUERY SELECT 1::smallint, r.*;
        RETURN;
    END IF;
    UPDATE @schema@.node_usage SET pending = pending + 1 WHERE node_rid = p_owner_rid;
    RETURN QUERY SELECT 0::smallint, r.*;
END
$$;

CREATE FUNCTION @schema@.commit_ready(
    p_ns text, p_id bytea, p_expected bigint,
    p_term_rid bytea, p_term_generation bigint, p_term_operation bytea, p_term_result bytea,
    p_retain double precision
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
    v_now double precision := @schema@.store_now();
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.state <> 'creating' THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    PERFORM @schema@.require_lease(v_now, r.owner_rid, r.owner_node_generation,
                                   r.owner_lease_generation);
    PERFORM @schema@.lock_usage(r.owner_rid);
    UPDATE @schema@.authority
    SET state = 'ready', pending_sha256 = NULL, pending_size = NULL, op_source_rid = NULL,
        op_source_generation = NULL, op_id = NULL,
        store_version = nextval('@schema@.store_version_seq')
    WHERE namespace = p_ns AND object_id = p_id AND store_version = p_expected
        AND state = 'creating'
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    UPDATE @schema@.node_usage SET active = active + 1, pending = pending - 1
    WHERE node_rid = r.owner_rid;
    IF p_term_rid IS NOT NULL THEN
        PERFORM @schema@.put_terminal(v_now, p_term_rid, p_term_generation, p_term_operation,
                                      p_term_result, p_retain);
    END IF;
    RETURN QUERY SELECT 0::smallint, r.*;
END
$$;

CREATE FUNCTION @schema@.abort_creation(
    p_ns text, p_id bytea, p_expected bigint,
    p_term_rid bytea, p_term_generation bigint, p_term_operation bytea, p_term_result bytea,
    p_retain double precision
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.state <> 'creating' THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    PERFORM @schema@.lock_usage(r.owner_rid);
    DELETE FROM @schema@.authority
    WHERE namespace = p_ns AND object_id = p_id AND store_version = p_expected
        AND state = 'creating'
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    UPDATE @schema@.node_usage SET pending = pending - 1 WHERE node_rid = r.owner_rid;
    IF p_term_rid IS NOT NULL THEN
        PERFORM @schema@.put_terminal(@schema@.store_now(), p_term_rid, p_term_generation,
                                      p_term_operation, p_term_result, p_retain);
    END IF;
    RETURN QUERY SELECT 0::smallint, (NULL::@schema@.authority).*;
END
$$;

CREATE FUNCTION @schema@.change_owner(
    p_ns text, p_id bytea, p_expected bigint,
    p_mesh bytea, p_rid bytea, p_node_generation bigint, p_lease_generation bigint
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
    n @schema@.nodes;
    u @schema@.node_usage;
    old_rid bytea;
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.state <> 'ready' THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    n := @schema@.require_lease(@schema@.store_now(), p_rid, p_node_generation,
                                p_lease_generation);
    old_rid := r.owner_rid;
    IF old_rid <> p_rid THEN
        -- both counters, locked in node_rid order
        IF old_rid < p_rid THEN
            PERFORM @schema@.lock_usage(old_rid);
            u := @schema@.lock_usage(p_rid);
        ELSE
            u := @schema@.lock_usage(p_rid);
            PERFORM @schema@.lock_usage(old_rid);
        END IF;
        IF u.active + u.pending >= n.capacity THEN
            RAISE EXCEPTION 'node % is at capacity %', encode(p_rid, 'hex'), n.capacity
                USING ERRCODE = 'ZL002';
        END IF;
    END IF;
    UPDATE @schema@.authority
    SET owner_mesh = p_mesh, owner_rid = p_rid, owner_node_generation = p_node_generation,
        owner_lease_generation = p_lease_generation, owner_generation = owner_generation + 1,
        relocation_id = NULL, relocation_mesh = NULL, relocation_rid = NULL,
        relocation_node_generation = NULL, relocation_lease_generation = NULL,
        relocation_sealed = NULL,
        store_version = nextval('@schema@.store_version_seq')
    WHERE namespace = p_ns AND object_id = p_id AND store_version = p_expected
        AND state = 'ready' AND owner_rid = old_rid
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    IF old_rid <> p_rid THEN
        UPDATE @schema@.node_usage SET active = active - 1 WHERE node_rid = old_rid;
        UPDATE @schema@.node_usage SET active = active + 1 WHERE node_rid = p_rid;
    END IF;
    RETURN QUERY SELECT 0::smallint, r.*;
END
$$;

CREATE FUNCTION @schema@.release(p_ns text, p_id bytea, p_expected bigint)
RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.state NOT IN ('ready', 'closing') THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    PERFORM @schema@.lock_usage(r.owner_rid);
    DELETE FROM @schema@.authority
    WHERE namespace = p_ns AND object_id = p_id AND store_version = p_expected
        AND state IN ('ready', 'closing')
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    UPDATE @schema@.node_usage SET active = active - 1 WHERE node_rid = r.owner_rid;
    RETURN QUERY SELECT 0::smallint, (NULL::@schema@.authority).*;
END
$$;

-- An Entry claim is active while the registration it names is current and unexpired.
CREATE FUNCTION @schema@.claim_live(p_now double precision, r @schema@.authority)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM @schema@.nodes n
        WHERE n.node_rid = r.owner_rid AND n.node_generation = r.owner_node_generation
            AND n.lease_generation = r.owner_lease_generation AND p_now < n.lease_expires_at)
$$;

CREATE FUNCTION @schema@.register_node(
    p_rid bytea, p_node_generation bigint, p_descriptors @schema@.descriptor_in[],
    p_capacity bigint, p_ttl double precision, p_entry_type bytea
) RETURNS TABLE (lease_generation bigint, lease_expires_at double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_now double precision := @schema@.store_now();
    v_lease bigint;
    old @schema@.nodes;
    d @schema@.descriptor_in;
    r @schema@.authority;
    replaced @schema@.authority[] := '{}';
BEGIN
    SELECT * INTO old FROM @schema@.nodes WHERE node_rid = p_rid FOR UPDATE;
    IF FOUND AND v_now < old.lease_expires_at THEN
        RAISE EXCEPTION 'descriptor of node % is held by a live lease', encode(p_rid, 'hex')
            USING ERRCODE = 'ZL005';
    END IF;
    FOREACH d IN ARRAY p_descriptors LOOP
        SELECT * INTO r FROM @schema@.authority
        WHERE namespace = 'spot' AND object_id = d.entry_spot_id FOR UPDATE;
        IF FOUND THEN
            IF r.kind <> 'entry_spot' OR @schema@.claim_live(v_now, r) THEN
                RAISE EXCEPTION 'Entry Spot id % is held by a live % row',
                    convert_from(d.entry_spot_id, 'UTF8'), r.kind
                    USING ERRCODE = 'ZL005';
            END IF;
            replaced := replaced || r;
        END IF;
    END LOOP;
    -- Nothing raises past this point. The NodeRid's expired registration goes first.
    IF old.node_rid IS NOT NULL THEN
        DELETE FROM @schema@.authority a
        USING @schema@.descriptors od
        WHERE od.node_rid = p_rid AND a.namespace = 'spot' AND a.object_id = od.entry_spot_id
            AND a.kind = 'entry_spot' AND a.owner_rid = p_rid;
        DELETE FROM @schema@.nodes WHERE node_rid = p_rid;
    END IF;
    -- Expired claims holding our new Entry ids, with the stale descriptors that published them.
    FOREACH r IN ARRAY replaced LOOP
        DELETE FROM @schema@.authority WHERE namespace = 'spot' AND object_id = r.object_id;
        DELETE FROM @schema@.descriptors
        WHERE node_rid = r.owner_rid AND entry_spot_id = r.object_id;
    END LOOP;
    v_lease := nextval('@schema@.lease_generation_seq');
    INSERT INTO @schema@.nodes
        VALUES (p_rid, p_node_generation, v_lease, v_now + p_ttl, p_capacity);
    FOREACH d IN ARRAY p_descriptors LOOP
        INSERT INTO @schema@.descriptors VALUES (
            d.mesh_name, p_rid, p_node_generation, d.host, d.port, d.object_role,
            d.actor_types, d.spot_types, d.instance_types, d.placement_weight,
            d.entry_spot_id);
        INSERT INTO @schema@.authority (
            namespace, object_id, kind, stable_type, state, store_version, object_generation,
            owner_generation, owner_mesh, owner_rid, owner_node_generation,
            owner_lease_generation)
        VALUES (
            'spot', d.entry_spot_id, 'entry_spot', p_entry_type,
            'ready', nextval('@schema@.store_version_seq'),
            nextval('@schema@.object_generation_seq'), 1,
            d.mesh_name, p_rid, p_node_generation, v_lease);
    END LOOP;
    RETURN QUERY SELECT v_lease, v_now + p_ttl;
END
$$;
