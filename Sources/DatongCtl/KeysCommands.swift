import ArgumentParser
import DatongContracts
import Foundation
import NIOHTTP1

/// `datongctl keys create|list|retire`: a project's encryption key pairs through the admin API.
struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage a project's encryption keys (the SDKs' enableEncrypt / enableTransportEncrypt).",
        subcommands: [CreateKey.self, ListKeys.self, RetireKey.self]
    )
}

struct CreateKey: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "create", abstract: "Make a new key pair under the next pkv; SDKs get it with their next config."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Option(help: "rsa (RSA-2048) or ec (EC P-256; apps need BouncyCastle/SpongyCastle or the iOS encrypt pod).")
    var type: String

    func execute(_ admin: Admin) async throws -> String {
        guard ["rsa", "ec"].contains(type.lowercased()) else { throw CtlFailure.usage("datongctl: --type is rsa or ec") }
        let body = Array(#"{"type":"\#(type.lowercased())"}"#.utf8)
        let key = try admin.decode(EncryptionKeyInfo.self, try await admin.send(.POST, try keysPath(project), body: body))
        return "created key pkv \(key.pkv) (\(key.type)) for \(project); public key \(key.publicKey)"
    }
}

struct ListKeys: CtlCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List a project's keys, oldest first (public keys only).")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String

    func execute(_ admin: Admin) async throws -> String {
        let keys = try admin.decode([EncryptionKeyInfo].self, try await admin.send(.GET, try keysPath(project)))
        guard !keys.isEmpty else { return "\(project) has no keys" }
        return keys.map { key in
            "\(key.pkv)\t\(key.type)\tcreated \(key.createdAt) by \(key.createdBy)\t" + (key.retiredAt.map { "retired \($0)" } ?? "active")
        }.joined(separator: "\n")
    }
}

struct RetireKey: CtlCommand {
    static let configuration = CommandConfiguration(
        commandName: "retire",
        abstract: "Retire a key: it is no longer served and no longer decrypts (envelopes made with it are kept, not stored)."
    )
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The project.")
    var project: String
    @Argument(help: "The key's pkv.")
    var pkv: Int

    func execute(_ admin: Admin) async throws -> String {
        guard pkv > 0 else { throw CtlFailure.usage("datongctl: a pkv is 1 or more") }
        _ = try await admin.send(.POST, try keysPath(project) + "/\(pkv)/retire")
        return "retired key pkv \(pkv) of \(project)"
    }
}

private func keysPath(_ project: String) throws -> String {
    guard ProjectName.isValid(project) else { throw CtlFailure.usage("datongctl: '\(project)' is not a project name") }
    return "/v1/projects/\(project)/keys"
}
