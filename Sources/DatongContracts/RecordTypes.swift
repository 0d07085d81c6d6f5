/// The record `type`s the SDKs send (docs/PROTOCOL.md section 2) and where each kind is stored.
package enum RecordTypes {
    /// Types stored as events (`analytics.events`).
    package static let events: Set<String> = ["track", "track_signup", "track_id_bind", "track_id_unbind"]
    /// Types that change a user's profile.
    package static let profiles: Set<String> = [
        "profile_set", "profile_set_once", "profile_increment", "profile_append", "profile_unset", "profile_delete",
    ]
    /// Types that change an item; they carry `item_type` / `item_id` and belong to no user.
    package static let items: Set<String> = ["item_set", "item_delete"]
    /// Types that change a detail (明细) of the multi-entity protocol (version 2.0): a row of a
    /// detail schema, keyed by schema and id (carried as `item_type` / `item_id`), that may belong
    /// to a user (`analytics.details`).
    package static let details: Set<String> = ["detail_set", "detail_delete"]

    package static let all = events.union(profiles).union(items).union(details)

    package static func isEvent(_ type: String) -> Bool { events.contains(type) }
    package static func isItem(_ type: String) -> Bool { items.contains(type) }
    package static func isDetail(_ type: String) -> Bool { details.contains(type) }
}
