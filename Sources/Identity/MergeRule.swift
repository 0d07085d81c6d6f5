import DatongContracts
import DatongRuntime
import IdentityCore

/// What the graph looks like to one record when it is applied: the owner of each of its
/// identities (absent: nobody owns it) and the login-class identities (key → value) of each of
/// those owners. `GraphTransaction` builds it from what it read under its locks.
struct GraphView: Equatable, Sendable {
    var owners: [IdentityKey: Int64] = [:]
    var logins: [Int64: [String: String]] = [:]

    /// `identity` now belongs to `user`.
    mutating func link(_ identity: IdentityKey, to user: Int64) {
        owners[identity] = user
        if IdentityRules.isLoginClass(identity.key) { logins[user, default: [:]][identity.key] = identity.value }
    }

    /// Everything `from` owned now belongs to `into`; `into` keeps its own value of a login key.
    mutating func merge(_ from: Int64, into: Int64) {
        for (identity, owner) in owners where owner == from { owners[identity] = into }
        logins[into] = (logins[into] ?? [:]).merging(logins[from] ?? [:]) { kept, _ in kept }
        logins[from] = [:]
    }
}

/// One change a record makes to the graph, in the order it is made.
enum GraphChange: Equatable, Sendable {
    /// Link an identity nobody owns to the record's user.
    case link(IdentityKey)
    /// Merge user `from`, with every identity it owns, into the record's user.
    case merge(from: Int64, reason: String)
    /// Detach an identity from its owner.
    case unbind(IdentityKey, from: Int64)
    /// Keep an entry in the history (a conflict, a refusal, a link through the API); the graph
    /// does not change.
    case note(GraphNote)
}

/// An entry for `identity.history`.
struct GraphNote: Equatable, Sendable {
    var kind: String
    var user: Int64?
    var other: Int64? = nil
    var identity: IdentityKey?
    var reason: String
}

/// Why an explicit link through the API was refused (a record in the same situation is stored,
/// and the conflict only recorded).
struct GraphRefusal: Error, Sendable {
    let code: ErrorCode
    let message: String
}

/// The identity graph's merge rule: what one record changes, as pure functions of its plan
/// (`IdentityRules.plan`) and the graph as it looks to the record (`GraphView`). The SQL around
/// it (`GraphTransaction`) only reads the view under locks and carries out the changes.
///
/// 1. A record that changes nothing (its identities belong to one user, or to nobody and it
///    links nothing) needs no lock: `needs` says so, and which locks the others take.
/// 2. `start`: a `$UnbindID` detaches its one pair and is finished. Any other record belongs to
///    the owner of its strongest identity; when nobody owns that, a new login id goes to the user
///    its other identities belong to unless that user already has a different one, and anything
///    else to the first owner found. Nobody: a new user.
/// 3. `attach`: its identities nobody owns are linked to that user, and every user owning one of
///    them is merged in, unless the two hold different values of a login-class key (two people:
///    the clash is recorded, or refused with `strict`, and they stay apart) or the record is a
///    `$BindID` that may not take that identity.
enum MergeRule {
    /// How far `start` takes a record.
    enum Start: Equatable, Sendable {
        /// The record is done: its user (nil: none) and what it changed.
        case finished(user: Int64?, changes: [GraphChange])
        /// The record belongs to this user (nil: a new one); `attach` says what it changes.
        case attach(user: Int64?)
    }

    /// The locks a record needs for the changes it would make (the identities it links and every
    /// user owning one of its identities), or nil when it changes nothing.
    static func needs(_ plan: IdentityPlan, owner: (IdentityKey) -> Int64?) -> (link: [IdentityKey], users: [Int64])? {
        var users: [Int64] = []
        var link: [IdentityKey] = []
        for identity in plan.identities {
            if let owner = owner(identity) {
                if !users.contains(owner) { users.append(owner) }
            } else if !plan.linksNothing {
                link.append(identity)
            }
        }
        let changes = plan.unbind != nil || !plan.refused.isEmpty || users.count > 1 || !link.isEmpty
        return changes ? (link, users) : nil
    }

    /// Finishes a record that only detaches or is refused, or finds the user the rest belongs to.
    static func start(_ plan: IdentityPlan, in view: GraphView) -> Start {
        let firstOwner = plan.identities.lazy.compactMap { view.owners[$0] }.first
        guard let primary = plan.identities.first else { return .finished(user: nil, changes: []) }
        if plan.linksNothing || plan.unbind != nil || !plan.refused.isEmpty {
            var changes = plan.refused.map { GraphChange.note(GraphNote(kind: "refused", user: firstOwner, identity: plan.unbind, reason: $0)) }
            guard let pair = plan.unbind else { return .finished(user: firstOwner, changes: changes) }
            guard let owner = view.owners[pair] else {
                changes.append(.note(GraphNote(kind: "refused", user: nil, identity: pair, reason: "\(pair.description) is not bound to anyone")))
                return .finished(user: firstOwner, changes: changes)
            }
            changes.append(.unbind(pair, from: owner))
            return .finished(user: owner, changes: changes)
        }
        if let owner = view.owners[primary] { return .attach(user: owner) }
        let loginClass = IdentityRules.isLoginClass(primary.key)
        for identity in plan.identities.dropFirst() {
            guard let owner = view.owners[identity] else { continue }
            if !loginClass || view.logins[owner]?[primary.key] == nil { return .attach(user: owner) }
        }
        return .attach(user: nil)
    }

    /// What a record that belongs to `user` links and merges. With `strict` (links through the
    /// API) a clash of login ids is refused instead of recorded.
    static func attach(_ plan: IdentityPlan, to user: Int64, in view: GraphView, strict: Bool) throws(GraphRefusal) -> [GraphChange] {
        var view = view
        var changes: [GraphChange] = []
        for identity in plan.identities {
            let owner = view.owners[identity]
            if owner == user { continue }
            guard let owner else {
                if IdentityRules.isLoginClass(identity.key), let held = view.logins[user]?[identity.key], !ExactText.equal(held, identity.value) {
                    let reason = "user \(user) already has \(identity.key)=\(held); \(identity.description) is not linked to it"
                    if strict { throw GraphRefusal(code: .loginConflict, message: reason) }
                    changes.append(.note(GraphNote(kind: "conflict", user: user, identity: identity, reason: reason)))
                    continue
                }
                changes.append(.link(identity))
                view.link(identity, to: user)
                if strict { changes.append(.note(GraphNote(kind: "link", user: user, identity: identity, reason: "linked through the API"))) }
                continue
            }
            guard plan.mayMerge(identity) else {
                let reason = "a $BindID cannot take \(identity.key) from user \(owner)"
                changes.append(.note(GraphNote(kind: "refused", user: user, other: owner, identity: identity, reason: reason)))
                continue
            }
            if let clash = clash(view.logins[user] ?? [:], view.logins[owner] ?? [:]) {
                let reason = "user \(user) has \(clash.key)=\(clash.kept) and user \(owner) has \(clash.key)=\(clash.other): two people, not merged"
                if strict { throw GraphRefusal(code: .loginConflict, message: reason) }
                changes.append(.note(GraphNote(kind: "conflict", user: user, other: owner, identity: identity, reason: reason)))
                continue
            }
            changes.append(.merge(from: owner, reason: "\(identity.description) belonged to user \(owner)"))
            view.merge(owner, into: user)
        }
        return changes
    }

    /// A login-class key both users hold with different values, if any (the first in key order):
    /// such users are two people and are not merged implicitly.
    static func clash(_ first: [String: String], _ second: [String: String]) -> (key: String, kept: String, other: String)? {
        for key in first.keys.sorted() {
            if let kept = first[key], let other = second[key], !ExactText.equal(kept, other) { return (key, kept, other) }
        }
        return nil
    }
}
