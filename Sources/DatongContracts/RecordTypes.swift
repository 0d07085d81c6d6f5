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

    package static let all = events.union(profiles).union(items)

    package static func isEvent(_ type: String) -> Bool { events.contains(type) }
    package static func isItem(_ type: String) -> Bool { items.contains(type) }
}
