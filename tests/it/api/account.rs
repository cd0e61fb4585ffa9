//! Numbers, wallet, transactions, balances and recordings (decisions §14), and
//! number renewal from the wallet.

use crate::support::{TestApp, eventually, utc};
use serde_json::{Value, json};
use voxline::admin::ops;
use voxline::domain::clock::ManualClock;
use voxline::domain::{NumberId, Paise};

#[tokio::test]
async fn wallet_transactions_and_balances_have_the_documented_shapes() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let other = app.workspace("B").await;

    let wallet = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_eq!(wallet.body, json!({"balancePaise": 0, "currency": "INR"}));
    let txs = app
        .get(&ws.key, "/api/wallet/transactions")
        .await
        .expect(200);
    assert_eq!(
        txs.body,
        json!({"rows": [], "total": 0, "page": 1, "limit": 20})
    );

    let now = app.now().timestamp_millis();
    for paise in [10_000, 2_500, 500] {
        app.store()
            .credit_wallet(ws.org_id, Paise(paise), now)
            .await
            .unwrap()
            .unwrap();
    }
    app.store()
        .credit_wallet(other.org_id, Paise(99), now)
        .await
        .unwrap();

    let wallet = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_eq!(
        wallet.body,
        json!({"balancePaise": 13_000, "currency": "INR"})
    );

    let txs = app
        .get(&ws.key, "/api/wallet/transactions")
        .await
        .expect(200)
        .body;
    assert_eq!(txs["total"], 3);
    assert_eq!(txs["page"], 1);
    assert_eq!(txs["limit"], 20);
    let rows = txs["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    // Newest first, with the balance after each movement.
    let amounts: Vec<i64> = rows
        .iter()
        .map(|r| r["amountPaise"].as_i64().unwrap())
        .collect();
    let after: Vec<i64> = rows
        .iter()
        .map(|r| r["balanceAfterPaise"].as_i64().unwrap())
        .collect();
    assert_eq!(amounts, vec![500, 2_500, 10_000]);
    assert_eq!(after, vec![13_000, 12_500, 10_000]);
    for row in rows {
        assert_eq!(row["kind"], "credit");
        assert!(row["id"].is_string());
        assert!(row["createdAt"].as_str().unwrap().ends_with('Z'));
        let keys: Vec<&String> = row.as_object().unwrap().keys().collect();
        for key in &keys {
            assert!(
                [
                    "id",
                    "kind",
                    "amountPaise",
                    "balanceAfterPaise",
                    "callId",
                    "numberId",
                    "createdAt"
                ]
                .contains(&key.as_str()),
                "unexpected field {key}"
            );
        }
    }
    let page2 = app
        .get(&ws.key, "/api/wallet/transactions?page=2&limit=2")
        .await
        .expect(200)
        .body;
    assert_eq!(page2["total"], 3);
    assert_eq!(page2["page"], 2);
    assert_eq!(page2["limit"], 2);
    assert_eq!(page2["rows"][0]["amountPaise"], 10_000);
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("page=0", "page"),
        ("page=-1", "page"),
    ] {
        let r = app
            .get(&ws.key, &format!("/api/wallet/transactions?{query}"))
            .await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        assert!(r.message().contains(param), "{query}: {}", r.text);
    }

    let balances = app.get(&ws.key, "/api/balances").await.expect(200).body;
    let used_so_far = balances["apiKey"]["dailyUsed"].as_i64().unwrap();
    assert!(used_so_far >= 10, "{balances}");
    assert_eq!(
        balances,
        json!({
            "walletPaise": 13_000,
            "minuteQuota": 10_000,
            "minutesUsed": 0,
            "minutesRemaining": 10_000,
            "apiKey": {
                "dailyLimit": 5_000,
                "dailyUsed": used_so_far,
                "monthlyLimit": 100_000,
                "monthlyUsed": used_so_far,
            }
        })
    );
    // The read counts itself.
    let again = app.get(&ws.key, "/api/balances").await.expect(200).body;
    assert_eq!(again["apiKey"]["dailyUsed"], used_so_far + 1);

    let theirs = app.get(&other.key, "/api/wallet").await.expect(200);
    assert_eq!(theirs.body["balancePaise"], 99);
}

#[tokio::test]
async fn recordings_list_is_an_envelope() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let r = app.get(&ws.key, "/api/recordings").await.expect(200);
    assert_eq!(
        r.body,
        json!({"rows": [], "total": 0, "page": 1, "limit": 20})
    );
    let r = app
        .get(&ws.key, "/api/recordings?page=3&limit=5")
        .await
        .expect(200);
    assert_eq!(
        r.body,
        json!({"rows": [], "total": 0, "page": 3, "limit": 5})
    );
    app.get(&ws.key, "/api/recordings?limit=500")
        .await
        .expect(400);
}

fn number(list: &Value, id: NumberId) -> &Value {
    list["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id.to_string())
        .unwrap_or_else(|| panic!("number {id} not listed in {list}"))
}

#[tokio::test]
async fn numbers_list_is_scoped_and_shaped() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("A").await;
    let other = app.workspace("B").await;
    let r = app.get(&ws.key, "/api/numbers").await.expect(200);
    assert_eq!(r.body, json!({"rows": []}));

    let now = app.now();
    let sim = ops::add_number(
        app.store(),
        ws.org_id,
        "+918035740111",
        "sim",
        false,
        None,
        now,
    )
    .await
    .unwrap();
    let twilio = app.add_number(&ws, "+14155550142", "twilio").await;
    app.add_number(&other, "+918035740999", "sim").await;

    let list = app.get(&ws.key, "/api/numbers").await.expect(200).body;
    assert_eq!(list.as_object().unwrap().len(), 1, "only rows: {list}");
    let rows = list["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["id"], twilio.id.to_string(), "default first");
    let t = number(&list, twilio.id);
    let mut keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        vec![
            "id",
            "inbound",
            "inboundAgentId",
            "inboundUrl",
            "isDefault",
            "monthlyRentPaise",
            "phone",
            "provider",
            "renewsAt",
            "rentedAt",
            "status"
        ]
    );
    assert_eq!(t["phone"], "+14155550142");
    assert_eq!(t["provider"], "twilio");
    assert_eq!(t["status"], "active");
    assert_eq!(t["isDefault"], true);
    assert_eq!(t["monthlyRentPaise"], 50_000);
    let rented = utc(t["rentedAt"].as_str().unwrap());
    let renews = utc(t["renewsAt"].as_str().unwrap());
    assert_eq!(
        renews,
        rented.checked_add_months(chrono::Months::new(1)).unwrap()
    );
    let s = number(&list, sim.id);
    assert_eq!(s["isDefault"], false);
    assert_eq!(s["monthlyRentPaise"], 0);
}

#[tokio::test]
async fn renewal_is_taken_from_the_wallet_and_a_short_balance_suspends() {
    let clock = ManualClock::new(utc("2026-01-15T10:00:00Z"));
    let app = TestApp::spawn_with_clock(clock.clone()).await;
    let ws = app.workspace("A").await;
    app.store()
        .credit_wallet(ws.org_id, Paise(60_000), app.now().timestamp_millis())
        .await
        .unwrap();
    let first = ops::add_number(
        app.store(),
        ws.org_id,
        "+14155550101",
        "twilio",
        true,
        Some(Paise(50_000)),
        app.now(),
    )
    .await
    .unwrap();
    clock.set(utc("2026-01-15T11:00:00Z"));
    let second = ops::add_number(
        app.store(),
        ws.org_id,
        "+14155550102",
        "twilio",
        false,
        Some(Paise(50_000)),
        app.now(),
    )
    .await
    .unwrap();

    // Nothing is due a minute before the first renewal date.
    clock.set(utc("2026-02-15T09:59:00Z"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let wallet = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_eq!(wallet.body["balancePaise"], 60_000);

    // A month and a bit later: the first is renewed, the second cannot be paid.
    clock.set(utc("2026-02-15T12:00:00Z"));
    let list = eventually(
        std::time::Duration::from_secs(5),
        "renewal and suspension",
        || async {
            let list = app.get(&ws.key, "/api/numbers").await.expect(200).body;
            let renewed = number(&list, first.id)["renewsAt"] != "2026-02-15T10:00:00.000Z";
            let suspended = number(&list, second.id)["status"] == "suspended";
            (renewed && suspended).then_some(list)
        },
    )
    .await;
    let a = number(&list, first.id);
    assert_eq!(a["status"], "active");
    assert_eq!(a["renewsAt"], "2026-03-15T10:00:00.000Z");
    let b = number(&list, second.id);
    assert_eq!(b["renewsAt"], "2026-02-15T11:00:00.000Z", "not renewed");

    let wallet = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_eq!(wallet.body["balancePaise"], 10_000);
    let txs = app
        .get(&ws.key, "/api/wallet/transactions")
        .await
        .expect(200)
        .body;
    assert_eq!(txs["total"], 2);
    let renewal = &txs["rows"][0];
    assert_eq!(renewal["kind"], "number-renewal");
    assert_eq!(renewal["amountPaise"], -50_000);
    assert_eq!(renewal["balanceAfterPaise"], 10_000);
    assert_eq!(renewal["numberId"], first.id.to_string());

    // Later passes never charge twice.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let txs = app
        .get(&ws.key, "/api/wallet/transactions")
        .await
        .expect(200)
        .body;
    assert_eq!(txs["total"], 2);

    // Topping up lets the next pass renew the suspended number.
    app.store()
        .credit_wallet(ws.org_id, Paise(45_000), app.now().timestamp_millis())
        .await
        .unwrap();
    let list = eventually(
        std::time::Duration::from_secs(5),
        "suspended number renewed after top-up",
        || async {
            let list = app.get(&ws.key, "/api/numbers").await.expect(200).body;
            (number(&list, second.id)["status"] == "active").then_some(list)
        },
    )
    .await;
    assert_eq!(
        number(&list, second.id)["renewsAt"],
        "2026-03-15T11:00:00.000Z"
    );
    let wallet = app.get(&ws.key, "/api/wallet").await.expect(200);
    assert_eq!(wallet.body["balancePaise"], 5_000);
}
