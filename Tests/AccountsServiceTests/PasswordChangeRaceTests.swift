import Foundation
import IAPProtocol
import RPCTestSupport
import Testing

@testable import AccountsService

/// A sign-in checks the password, then adds its session: a password change that commits in between must leave it no
/// session (an attacker signing in with a stolen password over and over would otherwise keep one past the change). The
/// session is added only while the hash the sign-in verified is still the account's, on either engine (`IAP_TEST_ENGINE`).
@Suite struct PasswordChangeRaceTests {
    @Test func aSessionCheckedAgainstAChangedPasswordIsNotAdded() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let owner = try await f.register("victim", "old password one")
        let (_, key) = try UsernamePolicy.normalize("victim")
        let before = try #require(try await f.store.account(usernameKey: key))
        // The sign-in of the attacker verified `before.passwordHash`; the owner changes the password meanwhile.
        _ = try await f.client.call(
            AccountsChangePassword.self, .init(session: owner.session.token, currentPassword: "old password one", newPassword: "new password two"))
        let after = try #require(try await f.store.account(usernameKey: key))
        #expect(after.passwordHash != before.passwordHash)
        func session(_ n: UInt8) -> NewSession {
            NewSession(tokenHash: Data(repeating: n, count: 32), deviceName: "attacker", createdAtMs: 1, expiresAtMs: Int64.max / 2)
        }
        #expect(try await f.store.addSession(session(1), accountId: owner.accountId, passwordHash: before.passwordHash, nowMs: 2, cap: 20) == false)
        #expect(try f.store.sessions(accountId: owner.accountId, nowMs: 2).map(\.deviceName) == [nil], "only the owner's session")
        #expect(try await f.store.addSession(session(2), accountId: owner.accountId, passwordHash: after.passwordHash, nowMs: 2, cap: 20))
        #expect(try f.store.sessions(accountId: owner.accountId, nowMs: 2).count == 2)
    }
}
