-- zlink_trio Location Store, schema version 3: the cross-node Join's one CAS.
--
-- * change_owner() takes the Actor's new membership too (p_set_membership, p_membership),
--   so a cross-node Join moves the owner and the Spot in ONE CAS: no reader sees the new
--   owner with the old Spot. Otherwise the same function as in 0001.

DROP FUNCTION @schema@.change_owner(text, bytea, bigint, bytea, bytea, bigint, bigint);

CREATE FUNCTION @schema@.change_owner(
    p_ns text, p_id bytea, p_expected bigint,
    p_mesh bytea, p_rid bytea, p_node_generation bigint, p_lease_generation bigint,
    p_set_membership boolean, p_membership bytea
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
        membership = CASE WHEN p_set_membership THEN p_membership ELSE membership END,
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

