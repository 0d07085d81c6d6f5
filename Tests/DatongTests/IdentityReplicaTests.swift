import DatongContracts
import DatongPostgres
import Foundation
import Testing

@testable import Identity

/// Two identity-service replicas (two stores with their own connection pools) on one database.
@Suite("identity-service replicas racing on new identities")
struct IdentityReplicaTests {
    @Test("many concurrent resolves of the same new identities through two replicas agree on one user each, and leave no user without identities")
    func race() async throws {
        let url = try await TestDatabase.create()
        let poolA = PostgresPool(url: url, maxConnections: 4, logger: TestDatabase.logger)
        let poolB = PostgresPool(url: url, maxConnections: 4, logger: TestDatabase.logger)
        do {
            try await Migrator.migrate(schema: IdentitySchema.name, migrations: IdentitySchema.migrations, pool: poolA, logger: TestDatabase.logger)
            let replicas = [PostgresIdentityStore(pool: poolA), PostgresIdentityStore(pool: poolB)]
            // 40 people, each seen at once by 16 uploads spread over both replicas, in shuffled
            // orders, each upload carrying a device id and (for half of them) the same login id.
            let people = 40
            func record(_ person: Int, login: Bool) -> IdentityRecord {
                var identities = ["$identity_cookie_id": "cookie-\(person)"]
                if login { identities["$identity_login_id"] = "user-\(person)" }
                return IdentityRecord(project: "default", type: "track", distinctId: "cookie-\(person)", identities: identities)
            }
            let answers = try await withThrowingTaskGroup(of: [(Int, Int64?)].self) { group in
                for upload in 0..<16 {
                    group.addTask {
                        let persons = Array(0..<people).shuffled()
                        let records = persons.map { record($0, login: upload % 2 == 0) }
                        let users = try await replicas[upload % 2].resolve(records)
                        return zip(persons, users.map(\.userId)).map { ($0, $1) }
                    }
                }
                return try await group.reduce(into: [(Int, Int64?)]()) { $0 += $1 }
            }
            var userOf: [Int: Set<Int64?>] = [:]
            for (person, user) in answers { userOf[person, default: []].insert(user) }
            #expect(userOf.count == people)
            #expect(userOf.values.allSatisfy { $0.count == 1 && $0.first! != nil }, "a person got several users")
            #expect(Set(userOf.values.compactMap { $0.first! }).count == people, "two people share a user")

            let rows = try await poolA.withConnection { connection in
                try connection.query(
                    """
                    SELECT (SELECT count(*) FROM identity.users),
                           (SELECT count(DISTINCT user_id) FROM identity.identities),
                           (SELECT count(*) FROM identity.identities),
                           (SELECT count(*) FROM identity.merges)
                    """
                ).rows
            }
            // No user was made twice and then merged away: the locks kept each person one user.
            #expect(rows == [[String(people), String(people), String(people * 2), "0"]])
            await poolA.close()
            await poolB.close()
        } catch {
            await poolA.close()
            await poolB.close()
            throw error
        }
    }
}
