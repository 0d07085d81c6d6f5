import DatongContracts
import DatongCrypto
import DatongRuntime
import Foundation
import Logging
import Synchronization

/// A project's encryption as the gateway uses it: the public keys it serves to SDKs, and the
/// private keys, opened once with the master key and kept parsed in memory, so an envelope costs
/// one unwrap and no lookup.
package struct ProjectKeys: Sendable {
    var transportEncryption: Bool
    /// Active keys, oldest first, as config-service listed them.
    var published: [ProjectEncryption.Key]
    var privateKeys: [Int: EnvelopePrivateKey]
    /// Keys that could not be opened (a master key that does not match), by pkv, with the reason.
    var unusable: [Int: String]

    package init(
        transportEncryption: Bool, published: [ProjectEncryption.Key], privateKeys: [Int: EnvelopePrivateKey], unusable: [Int: String]
    ) {
        self.transportEncryption = transportEncryption
        self.published = published
        self.privateKeys = privateKeys
        self.unusable = unusable
    }

    static let none = ProjectKeys(transportEncryption: false, published: [], privateKeys: [:], unusable: [:])

    /// Whether these keys say what to do with envelopes of `pkv`: open them, or keep them with
    /// the reason the key cannot be opened. Otherwise the key may have been made a moment ago.
    func knows(_ pkv: Int) -> Bool { privateKeys[pkv] != nil || unusable[pkv] != nil }

    /// The newest active key of each type.
    func newest(_ type: KeyType) -> ProjectEncryption.Key? { published.last { $0.type == type.rawValue } }
}

/// Every project's keys, read from config-service (`GET /v1/projects/{p}/encryption`) and kept for
/// `refreshInterval`; an envelope naming a pkv not known yet makes one read at once (at most one a
/// second per project), so a key made a moment ago decrypts at once. While config-service cannot
/// be reached the last answer stays in force; a project never read is a 503 (the SDK retries).
final class EncryptionKeyring: Sendable {
    private struct Entry {
        var keys: ProjectKeys
        var fetchedAt: ContinuousClock.Instant
    }

    private let config: ServiceClient
    private let sealer: KeySealer?
    private let refreshInterval: Duration
    private let entries = Mutex<[String: Entry]>([:])

    init(config: ServiceClient, sealer: KeySealer?, refreshInterval: Duration) {
        self.config = config
        self.sealer = sealer
        self.refreshInterval = refreshInterval
    }

    /// Whether this gateway can open private keys at all (`ENCRYPTION_MASTER_KEY` is set).
    var canDecrypt: Bool { sealer != nil }

    /// The project's keys; `fresh` forces a read unless one happened in the last second.
    func keys(for project: String, fresh: Bool = false, logger: Logger) async throws -> ProjectKeys {
        let now = ContinuousClock.now
        let cached = entries.withLock { $0[project] }
        if let cached {
            let age = now - cached.fetchedAt
            if age < (fresh ? .seconds(1) : refreshInterval) { return cached.keys }
        }
        let fetched: ProjectKeys
        do {
            switch try await config.fetchDocument("/v1/projects/\(project)/encryption", etag: nil, maxBytes: 1 << 20, logger: logger) {
            case .absent, .notModified:
                fetched = .none
            case .document(_, let body):
                guard let encryption = try? JSONDecoder().decode(ProjectEncryption.self, from: Data(body)) else {
                    throw ServiceError.unavailable(.badAnswer(from: .config), "config-service gave an answer the gateway cannot read")
                }
                fetched = open(encryption, project: project, logger: logger)
            }
        } catch {
            guard let cached else { throw error }
            return cached.keys
        }
        entries.withLock { entries in
            if entries[project] == nil, entries.count >= 4096 { entries.removeAll(keepingCapacity: true) }
            entries[project] = Entry(keys: fetched, fetchedAt: now)
        }
        return fetched
    }

    /// Opens each sealed private key once (reused keys are kept as they are).
    private func open(_ encryption: ProjectEncryption, project: String, logger: Logger) -> ProjectKeys {
        let previous = entries.withLock { $0[project]?.keys.privateKeys } ?? [:]
        var keys = ProjectKeys(transportEncryption: encryption.transportEncryption, published: encryption.keys, privateKeys: [:], unusable: [:])
        for key in encryption.keys {
            if let known = previous[key.pkv] {
                keys.privateKeys[key.pkv] = known
                continue
            }
            guard let sealer else {
                keys.unusable[key.pkv] = "this gateway has no ENCRYPTION_MASTER_KEY"
                continue
            }
            do {
                guard let type = KeyType(rawValue: key.type), let sealed = Data(base64Encoded: key.sealedPrivateKey) else {
                    throw CryptoFailure("key \(key.pkv) is not a key config-service makes")
                }
                let der = try sealer.open(Array(sealed), label: ProjectEncryption.sealLabel(project: project, pkv: key.pkv))
                keys.privateKeys[key.pkv] = try EnvelopePrivateKey(pkcs8DER: der, type: type, pkv: key.pkv)
            } catch let failure as CryptoFailure {
                keys.unusable[key.pkv] = failure.description
                logger.error("encryption.key_unusable", metadata: ["project": "\(project)", "pkv": "\(key.pkv)", "reason": "\(failure.description)"])
            } catch {
                keys.unusable[key.pkv] = "\(error)"
            }
        }
        return keys
    }
}
