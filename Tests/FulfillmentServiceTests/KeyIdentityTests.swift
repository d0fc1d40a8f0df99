import Foundation
import ServiceSupport
import Testing

/// The ids the simulator writes beside each key it issues, read by verification (`--app-store-api-key`) and
/// fulfillment (`--offer-key`) when no flag gives them.
@Suite struct KeyIdentityTests {
    @Test func theIdsBesideAKeyAreReadFromTheSameNameWithJSON() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("key-identity-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(#"{"keyId":"ABC123DEFG","issuerId":"57246542-96fe-1a63-e053-0824d011072a"}"#.utf8)
            .write(to: dir.appendingPathComponent("offer-key.json"))
        let identity = try #require(KeyIdentity.beside(dir.appendingPathComponent("offer-key.p8").path))
        #expect(identity.keyId == "ABC123DEFG" && identity.issuerId == "57246542-96fe-1a63-e053-0824d011072a")
        // Another key's ids are not borrowed, and a missing or unreadable file gives none.
        #expect(KeyIdentity.beside(dir.appendingPathComponent("api-key.p8").path) == nil)
        try Data("not json".utf8).write(to: dir.appendingPathComponent("api-key.json"))
        #expect(KeyIdentity.beside(dir.appendingPathComponent("api-key.p8").path) == nil)
    }
}
