import DatongContracts
import DatongCrypto
import DatongJSON
import DatongRuntime
import Foundation
import Hummingbird
import Logging
import NIOFoundationEssentialsCompat
import NIOPosix

/// The admin API of a project's encryption keys (docs/PROTOCOL-ENCRYPTION.md): create (RSA-2048 or
/// EC P-256, each under a new pkv), list (public keys only), retire; transport encryption on or off;
/// and the internal read the gateway decrypts with (sealed private keys, service token only).
struct EncryptionKeysAPI: ServiceAPI {
    let store: any ConfigStore
    let auth: AdminAuth
    let serviceToken: ServiceToken
    /// nil without `ENCRYPTION_MASTER_KEY`: no key can be made then.
    let sealer: KeySealer?

    func register(on router: Router<DatongRequestContext>) {
        router.post("/v1/projects/:project/keys") { request, context in try await create(request, context) }
        router.get("/v1/projects/:project/keys") { request, context in
            _ = try await auth.authorize(request)
            let project = try context.project()
            guard try await store.projectExists(project) else { throw Self.unknownProject(project) }
            return try jsonResponse(.ok, encoding: try await store.listKeys(project: project))
        }
        router.post("/v1/projects/:project/keys/:pkv/retire") { request, context in try await retire(request, context) }
        router.put("/v1/projects/:project/transport-encryption") { request, context in
            let actor = try await auth.authorize(request)
            let project = try context.project()
            let body = try await collectBody(request, limit: 1024)
            guard let enabled = bodyObject(body)?["enabled"]?.boolValue else {
                throw ServiceError.badRequest(.invalidBody, #"send {"enabled": true} or {"enabled": false}"#)
            }
            guard try await store.setTransportEncryption(project: project, enabled: enabled, actor: actor) else { throw Self.unknownProject(project) }
            context.logger.info("audit.project.transport_encryption", metadata: ["project": "\(project)", "enabled": "\(enabled)", "actor": "\(actor)"])
            return jsonResponse(.ok, #"{"project":"\#(project)","transportEncryption":\#(enabled)}"#)
        }
        router.get("/v1/projects/:project/encryption") { request, context in
            try serviceToken.check(request)
            let project = try context.project()
            guard let encryption = try await store.encryption(project: project) else { throw Self.unknownProject(project) }
            return try jsonResponse(.ok, encoding: encryption)
        }
    }

    private func create(_ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        let body = try await collectBody(request, limit: 1024)
        guard let name = bodyObject(body)?["type"]?.stringValue,
            let type = KeyType(rawValue: name.lowercased())
        else {
            throw ServiceError.badRequest(.invalidKeyType, #"send {"type": "rsa"} (RSA-2048) or {"type": "ec"} (EC P-256)"#)
        }
        guard let sealer else {
            throw ServiceError(
                .conflict, .noMasterKey,
                "config-service has no ENCRYPTION_MASTER_KEY, so it cannot keep a private key; set it (openssl rand -base64 32) and restart")
        }
        // RSA key generation takes tens of milliseconds of CPU: never on an event loop.
        let pair = try await NIOThreadPool.singleton.runIfActive { try GeneratedKeyPair.generate(type) }
        guard let key = try await store.createKey(project: project, pair: pair, sealer: sealer, actor: actor) else { throw Self.unknownProject(project) }
        context.logger.info("audit.key.created", metadata: ["project": "\(project)", "pkv": "\(key.pkv)", "type": "\(type.rawValue)", "actor": "\(actor)"])
        return try jsonResponse(.created, encoding: key)
    }

    private func retire(_ request: Request, _ context: DatongRequestContext) async throws -> Response {
        let actor = try await auth.authorize(request)
        let project = try context.project()
        guard let pkv = context.parameters.get("pkv").flatMap(Int.init), pkv > 0 else {
            throw ServiceError.badRequest(.invalidPkv, "pkv is a key's number (1, 2, …)")
        }
        switch try await store.retireKey(project: project, pkv: pkv, actor: actor) {
        case nil: throw ServiceError(.notFound, .unknownKey, "project '\(project)' has no key \(pkv)")
        case false?: throw ServiceError(.conflict, .keyRetired, "key \(pkv) of project '\(project)' is retired already")
        case true?:
            context.logger.info("audit.key.retired", metadata: ["project": "\(project)", "pkv": "\(pkv)", "actor": "\(actor)"])
            let key = try await store.listKeys(project: project).first { $0.pkv == pkv }
            return try jsonResponse(.ok, encoding: key)
        }
    }

    private static func unknownProject(_ project: String) -> ServiceError {
        ServiceError(.notFound, .unknownProject, "there is no project '\(project)'")
    }
}
