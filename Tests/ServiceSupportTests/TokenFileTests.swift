import Foundation
import ServiceSupport
import Testing

/// A service's token from `<NAME>_FILE` (a Docker or Compose secret, a mounted file) rather than the environment itself.
@Suite struct TokenFileTests {
    @Test func aTokenIsReadFromTheFileItsVariableNamesAndNeverFromBoth() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("token-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        let token = String(repeating: "k", count: 40)
        try Data((token + "\n").utf8).write(to: file)
        #expect(try Environment.fromEnvironment("IAP_ADMIN_TOKEN", ["IAP_ADMIN_TOKEN_FILE": file.path]) == token, "its final newline dropped")
        #expect(try Environment.fromEnvironment("IAP_ADMIN_TOKEN", ["IAP_ADMIN_TOKEN": "direct"]) == "direct")
        #expect(try Environment.fromEnvironment("IAP_ADMIN_TOKEN", [:]) == nil)
        #expect(try Environment.fromEnvironment("IAP_ADMIN_TOKEN", ["IAP_ADMIN_TOKEN": "", "IAP_ADMIN_TOKEN_FILE": file.path]) == token)
        #expect(try Environment.fromEnvironment("IAP_ADMIN_TOKEN_PREVIOUS", ["IAP_ADMIN_TOKEN_PREVIOUS_FILE": file.path]) == token)
        #expect(throws: (any Error).self, "both set: which one is meant?") {
            try Environment.fromEnvironment("IAP_ADMIN_TOKEN", ["IAP_ADMIN_TOKEN": "direct", "IAP_ADMIN_TOKEN_FILE": file.path])
        }
        #expect(throws: (any Error).self, "a file that cannot be read stops the start") {
            try Environment.fromEnvironment("IAP_ADMIN_TOKEN", ["IAP_ADMIN_TOKEN_FILE": file.path + ".missing"])
        }
    }
}
