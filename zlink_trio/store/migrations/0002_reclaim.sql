-- zlink_trio Location Store, schema version 2: bounded reservations and reclaim.
--
-- * authority.attempt_expires_at: store time of the deadline of the attempt that made a
--   Creating row (NULL once Ready, or for a reservation made without one);
-- * terminal retention anchored on it: commit_ready/abort_creation keep the terminal
--   until attempt_expires_at + retention (the original deadline + retention, however
--   long the attempt took), else store now + retention;
-- * reclaim(): the CAS that ends an incarnation whose owner lease is no longer current
--   (or, for a Creating row, whose attempt deadline + grace passed);
-- * owner_live(), list_reclaimable(): the reads the lazy reclaim and the sweep use.
-- Same conventions as 0001 (lock order: nodes, then node_usage, then authority).

ALTER TABLE @schema@.authority ADD COLUMN attempt_expires_at double precision;
ALTER TYPE @schema@.outcome ADD ATTRIBUTE attempt_expires_at double precision;
CREATE INDEX authority_attempt_expires_at ON @schema@.authority (attempt_expires_at)
    WHERE state = 'creating';

DROP FUNCTION @schema@.reserve(
    text, bytea, text, bytea, bytea, bytea, bigint, bigint, bytea, bytea, bigint,
    bytea, bigint, bytea, bytea, bigint, bigint);

CREATE FUNCTION @schema@.reserve(
    p_ns text, p_id bytea, p_kind text, p_stable_type bytea,
    p_owner_mesh bytea, p_owner_rid bytea, p_owner_node_generation bigint,
    p_owner_lease_generation bigint, p_membership bytea,
    p_pending_sha256 bytea, p_pending_size bigint,
    p_op_source_rid bytea, p_op_source_generation bigint, p_op_id bytea,
    p_recovery_sha256 bytea, p_recovery_size bigint, p_recovery_cursor bigint,
    p_attempt_ttl double precision
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    v_now double precision := @schema@.store_now();
    n @schema@.nodes;
    d @schema@.descriptors;
    u @schema@.node_usage;
    r @schema@.authority;
    types bytea[];
BEGIN
    -- order: owner lease, existing row, type, capacity
    n := @schema@.require_lease(v_now, p_owner_rid, p_owner_node_generation,
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
        NULL, NULL, NULL, NULL, NULL, NULL,
        v_now + p_attempt_ttl)
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

CREATE OR REPLACE FUNCTION @schema@.commit_ready(
    p_ns text, p_id bytea, p_expected bigint,
    p_term_rid bytea, p_term_generation bigint, p_term_operation bytea, p_term_result bytea,
    p_retain double precision
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
    v_now double precision := @schema@.store_now();
    v_since double precision;
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.state <> 'creating' THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    v_since := r.attempt_expires_at;  -- the UPDATE below matches only this version
    PERFORM @schema@.require_lease(v_now, r.owner_rid, r.owner_node_generation,
                                   r.owner_lease_generation);
    PERFORM @schema@.lock_usage(r.owner_rid);
    UPDATE @schema@.authority
    SET state = 'ready', pending_sha256 = NULL, pending_size = NULL, op_source_rid = NULL,
        op_source_generation = NULL, op_id = NULL, attempt_expires_at = NULL,
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
                                      p_term_result, coalesce(v_since, v_now) - v_now + p_retain);
    END IF;
    RETURN QUERY SELECT 0::smallint, r.*;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.abort_creation(
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
        PERFORM @schema@.put_terminal(v_now, p_term_rid, p_term_generation, p_term_operation,
                                      p_term_result,
                                      coalesce(r.attempt_expires_at, v_now) - v_now + p_retain);
    END IF;
    RETURN QUERY SELECT 0::smallint, (NULL::@schema@.authority).*;
END
$$;

-- Whether the row's owner can no longer act (its lease is not current by store time) or,
-- for a Creating row, its attempt's deadline + grace passed.
CREATE FUNCTION @schema@.reclaimable(
    p_now double precision, r @schema@.authority, p_grace double precision
) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT @schema@.claim_live(p_now, r)
        OR (r.state = 'creating' AND r.attempt_expires_at IS NOT NULL
            AND p_now >= r.attempt_expires_at + p_grace)
$$;

CREATE FUNCTION @schema@.reclaim(
    p_ns text, p_id bytea, p_expected bigint,
    p_mesh bytea, p_rid bytea, p_node_generation bigint, p_lease_generation bigint,
    p_grace double precision
) RETURNS SETOF @schema@.outcome
LANGUAGE plpgsql AS $$
DECLARE
    r @schema@.authority;
    v_now double precision := @schema@.store_now();
BEGIN
    SELECT * INTO r FROM @schema@.authority WHERE namespace = p_ns AND object_id = p_id;
    IF NOT FOUND OR r.kind = 'entry_spot' OR r.store_version <> p_expected
            OR r.owner_mesh <> p_mesh OR r.owner_rid <> p_rid
            OR r.owner_node_generation <> p_node_generation
            OR r.owner_lease_generation <> p_lease_generation THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    -- Lock the owner's lease row (a renewal in flight commits first, then we read it).
    PERFORM 1 FROM @schema@.nodes WHERE node_rid = p_rid FOR SHARE;
    IF NOT @schema@.reclaimable(v_now, r, p_grace) THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    PERFORM @schema@.lock_usage(r.owner_rid);
    DELETE FROM @schema@.authority
    WHERE namespace = p_ns AND object_id = p_id AND store_version = p_expected
    RETURNING * INTO r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM @schema@.lost(p_ns, p_id);
        RETURN;
    END IF;
    IF r.state = 'creating' THEN
        UPDATE @schema@.node_usage SET pending = pending - 1 WHERE node_rid = r.owner_rid;
    ELSE
        UPDATE @schema@.node_usage SET active = active - 1 WHERE node_rid = r.owner_rid;
    END IF;
    RETURN QUERY SELECT 0::smallint, (NULL::@schema@.authority).*;
END
$$;
